"""What the EU AI Act pack says: provisions cited, section titles, retention and limitations.

Kept apart from the code that builds the pack so that the legal wording can be reviewed (and
corrected against the Official Journal) in one place.
"""

from __future__ import annotations

from typing import Final

BUNDLE_NAME: Final = "bundle.tar"
VERIFICATION_NAME: Final = "verification.json"
REPORT_JSON: Final = "report.json"
REPORT_HTML: Final = "report.html"
README_NAME: Final = "README.txt"
PACK_MANIFEST: Final = "pack-manifest.json"
PACK_FILES: Final = (BUNDLE_NAME, VERIFICATION_NAME, REPORT_JSON, REPORT_HTML, README_NAME)

REGULATION: Final = "Regulation (EU) 2024/1689"

PROVISIONS: Final[tuple[tuple[str, str, str, str], ...]] = (
    (
        "art-12-1",
        "Regulation (EU) 2024/1689, Article 12(1)",
        "High-risk AI systems shall technically allow for the automatic recording of events "
        "(logs) over the lifetime of the system.",
        "met",
    ),
    (
        "art-12-2-a",
        "Regulation (EU) 2024/1689, Article 12(2)(a)",
        "Logging capabilities shall enable the recording of events relevant for identifying "
        "situations that may result in the high-risk AI system presenting a risk within the "
        "meaning of Article 79(1) or in a substantial modification.",
        "met",
    ),
    (
        "art-12-2-b",
        "Regulation (EU) 2024/1689, Article 12(2)(b)",
        "Logging capabilities shall enable the recording of events relevant for facilitating "
        "the post-market monitoring referred to in Article 72.",
        "met",
    ),
    (
        "art-12-2-c",
        "Regulation (EU) 2024/1689, Article 12(2)(c)",
        "Logging capabilities shall enable the recording of events relevant for monitoring the "
        "operation of high-risk AI systems referred to in Article 26(5).",
        "met",
    ),
    (
        "art-12-3",
        "Regulation (EU) 2024/1689, Article 12(3)(a)-(d)",
        "Applies only to remote biometric identification systems referred to in Annex III "
        "point 1(a); not applicable to a coding-agent harness. (Minimum logging for those "
        "systems: (a) period of each use, (b) reference database, (c) input data that led to a "
        "match, (d) natural persons verifying the results per Article 14(5).)",
        "not-applicable",
    ),
    (
        "art-19-1",
        "Regulation (EU) 2024/1689, Article 19(1)",
        "Providers keep the automatically generated logs under their control for a period "
        "appropriate to the intended purpose, of at least six months, unless provided "
        "otherwise in applicable Union or national law.",
        "met",
    ),
    (
        "art-26-6",
        "Regulation (EU) 2024/1689, Article 26(6)",
        "Deployers keep the automatically generated logs under their control for a period "
        "appropriate to the intended purpose, of at least six months, unless provided "
        "otherwise in applicable Union or national law.",
        "met",
    ),
    (
        "art-72",
        "Regulation (EU) 2024/1689, Article 72",
        "Post-market monitoring by providers: collect, document and analyse relevant data on "
        "the performance of the system throughout its lifetime.",
        "supports",
    ),
    (
        "annex-iv-2",
        "Regulation (EU) 2024/1689, Annex IV (technical documentation), point 2",
        "Detailed description of the elements of the AI system and of the process for its "
        "development (the logging design this pack documents).",
        "supports",
    ),
    (
        "annex-iv-6",
        "Regulation (EU) 2024/1689, Annex IV (technical documentation), point 6",
        "A description of relevant changes made by the provider to the system through its "
        "lifecycle.",
        "supports",
    ),
)
"""(id, citation, summary of the provision, status of this pack against it)."""

SECTION_PROVISIONS: Final[dict[str, tuple[str, ...]]] = {
    "system": ("art-12-1", "annex-iv-2"),
    "periods": ("art-12-1", "art-12-2-c"),
    "actors": ("art-12-2-c", "art-72"),
    "events": ("art-12-1", "art-12-2-b", "art-12-2-c", "art-72"),
    "interventions": ("art-12-2-c", "art-72"),
    "risks": ("art-12-2-a", "art-72"),
    "changes": ("art-12-2-a", "annex-iv-6"),
    "integrity": ("art-12-1", "art-19-1", "art-26-6"),
    "retention": ("art-19-1", "art-26-6"),
    "verification": ("art-12-1", "art-72"),
}
"""Which provisions each report section serves (Art. 12(3) is served by none: not applicable)."""

SECTION_TITLES: Final[dict[str, str]] = {
    "system": "System identity and version",
    "periods": "Period of each use",
    "actors": "Actors and models",
    "events": "Events by kind",
    "interventions": "Human interventions and approvals",
    "risks": "Situations that may present a risk",
    "changes": "Changes over the period",
    "integrity": "Integrity evidence",
    "provisions": "Provisions mapping",
    "retention": "Retention statement",
    "verification": "Offline verification",
    "limitations": "What this pack does not cover",
}

DELETION_POLICY: Final = (
    "The controller keeps this pack and the state it was exported from, unaltered, for at "
    "least the retention period after the end of the last run it covers, then deletes them "
    "(or keeps them longer where Union or national law requires it); personal data in the "
    "records is handled under the applicable data-protection law, in particular Regulation "
    "(EU) 2016/679."
)
RETENTION_NOTE: Final = (
    "Article 19(1) (providers) and Article 26(6) (deployers) of Regulation (EU) 2024/1689 "
    "require logs to be kept for a period appropriate to the intended purpose, of at least six "
    "months, unless provided otherwise in applicable Union or national law. Article 12 itself "
    "sets no retention period."
)
LIMITATIONS: Final = (
    "This pack is not a conformity assessment and not legal advice.",
    "A coding-agent harness is usually not a high-risk AI system (Annex III); this pack is good "
    "practice, ready for audit, not evidence that the system is high-risk or compliant.",
    "Record times come from the producer's clock; the pack does not prove when events happened.",
    "The pack proves the integrity, order and completeness of the signed records, not that the "
    "agents behaved correctly or that their changes are right.",
    "Article 12(3)(a)-(d) applies only to remote biometric identification systems (Annex III "
    "point 1(a)) and is not claimed.",
    "Runs are selected whole when any of their records fall in the window.",
)
