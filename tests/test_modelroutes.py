"""Plan model routes (issue 18 B): ``[models.<route>]``, a task's / plan adapter's ``models``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from harness.orchestrate.modelroutes import BUILTIN_ROUTES, batch_routes, task_routes
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.plandoc import plan_document
from harness.orchestrate.planfields import PlanError

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[1] / "schemas" / "plan.schema.json").read_text()
)


def _plan(table: Any = None, **task: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "plan": {"name": "p"},
        "task": [{"id": "t1", "role": "r", "prompt": "x", "adapter": "claude", **task}],
    }
    if table is not None:
        doc["models"] = table
    return doc


FAKE = {"family": "anthropic", "base": "http://127.0.0.1:9/", "key_env": "FAKE_KEY"}


def test_routes_parse_bind_and_validate_against_the_schema() -> None:
    doc = _plan({"fake": FAKE}, models=["fake"])
    plan = parse_plan(doc)
    assert plan.models["fake"].host == "127.0.0.1"
    assert plan.models["fake"].key_env == "FAKE_KEY"
    assert task_routes(plan.tasks[0], plan.commands) == ("fake",)
    document = plan_document(plan)  # the routes are bound by the plan digest
    assert document["models"]["fake"]["base"] == "http://127.0.0.1:9/"
    assert document["tasks"][0]["models"] == ["fake"]
    assert not list(Draft202012Validator(SCHEMA).iter_errors(doc))


def test_default_routes_per_adapter() -> None:
    plan = parse_plan(
        {
            "plan": {"name": "p"},
            "adapter": {"mine": {"command": ["mine"], "models": ["openai"]}},
            "task": [
                {"id": "a", "role": "r", "prompt": "x", "adapter": "claude"},
                {"id": "b", "role": "r", "prompt": "x", "adapter": "codex"},
                {"id": "c", "role": "r", "prompt": "x", "adapter": "aider"},
                {"id": "d", "role": "r", "prompt": "x", "adapter": "scripted"},
                {"id": "e", "role": "r", "prompt": "x", "adapter": "gemini"},
                {"id": "f", "role": "r", "prompt": "x", "adapter": "mine"},
            ],
        }
    )
    routes = [task_routes(task, plan.commands) for task in plan.tasks]
    assert routes == [("anthropic",), ("openai",), ("anthropic", "openai"), None, ("google",),
                      ("openai",)]  # fmt: skip
    assert BUILTIN_ROUTES["openai"].base == "https://api.openai.com/v1"
    google = BUILTIN_ROUTES["google"]  # the Gemini API: its SDK's paths are /v1beta/...
    assert (google.family, google.base, google.key_env, google.prefix) == (
        "google", "https://generativelanguage.googleapis.com", "GEMINI_API_KEY", "/v1beta/",
    )  # fmt: skip
    c = plan.tasks[2]
    narrowed = type(c)(**{**c.__dict__, "models": ("openai",)})
    assert batch_routes([c, narrowed], plan.commands) == ("openai",)


@pytest.mark.parametrize(
    ("doc", "key", "words"),
    [
        (_plan({"Bad": FAKE}), "models.Bad", "route name"),
        (_plan({"x": {**FAKE, "family": "cohere"}}), "models.x.family", "not one of"),
        (_plan({"x": {**FAKE, "base": "http://api.example.com"}}), "models.x.base", "loopback"),
        (_plan({"x": {**FAKE, "base": "https://u:p@h.example"}}), "models.x.base", "userinfo"),
        (_plan({"x": {**FAKE, "base": "ftp://h"}}), "models.x.base", "https://"),
        (_plan({"x": {**FAKE, "key": "sk-1"}}), "models.x.key", "unknown key"),
        (_plan({"x": {**FAKE, "key_env": "lower"}}), "models.x.key_env", "variable"),
        (_plan({"x": {**FAKE, "path_prefix": "v1"}}), "models.x.path_prefix", "absolute"),
        (_plan(models=["nowhere"]), "task[0].models[0]", "not defined"),
        (_plan(models=["openai"]), "task[0].models[0]", "speaks anthropic"),
        (_plan(models=[]), "task[0].models", "at least one"),
        (_plan(models=["anthropic", "anthropic"]), "task[0].models[1]", "repeats"),
        (_plan(adapter="scripted", models=["anthropic"]), "task[0].models", "not proxied"),
    ],
)
def test_bad_routes_are_plan_errors(doc: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(PlanError) as info:
        parse_plan(doc)
    assert info.value.key == key
    assert words in info.value.message


def test_a_plan_adapter_route_must_be_defined() -> None:
    doc = {"plan": {"name": "p"}, "adapter": {"mine": {"command": ["m"], "models": ["nope"]}}}
    with pytest.raises(PlanError, match="not defined") as info:
        parse_plan(doc)
    assert info.value.key == "adapter.mine.models[0]"


def test_with_a_capsule_every_route_host_must_be_an_egress_host() -> None:
    capsule = {"goal": "g", "expires": "2030-01-01T00:00:00.000000Z"}
    with pytest.raises(PlanError, match=r"reaches api\.anthropic\.com") as info:
        parse_plan({**_plan(), "capsule": capsule})
    assert info.value.key == "task[0]"
    # the host of a route the plan defines, and of the task's own narrowed route
    doc = {**_plan({"fake": FAKE}, models=["fake"]), "capsule": capsule}
    with pytest.raises(PlanError, match=r"'fake' reaches 127\.0\.0\.1"):
        parse_plan(doc)
    allowed = parse_plan({**doc, "capsule": {**capsule, "egress": ["127.0.0.1"]}})
    assert allowed.capsule is not None and allowed.capsule.egress == ("127.0.0.1",)
    # an unproxied adapter reaches no upstream: nothing to allow
    assert parse_plan({**_plan(adapter="scripted"), "capsule": capsule}).capsule is not None


def test_an_unset_key_variable_of_a_used_route_is_a_warning() -> None:
    from harness.orchestrate.modelroutes import key_warnings

    table = {"fake": FAKE, "unused": {**FAKE, "key_env": "OTHER"}}
    plan = parse_plan(_plan(table, models=["fake"]))
    words = key_warnings(plan.tasks, plan.models, plan.commands, {})
    assert words == [
        "model route 'fake': FAKE_KEY is not set, so its requests go upstream (127.0.0.1) "
        "without a key"
    ]
    assert key_warnings(plan.tasks, plan.models, plan.commands, {"FAKE_KEY": "k"}) == []
