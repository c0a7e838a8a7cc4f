"""Running ``harness-verify`` with the network made to fail, for the Sigstore tests.

Every Sigstore test runs the real CLI in a child process whose ``socket.socket.connect``,
``connect_ex`` and ``socket.create_connection`` raise before anything else is imported: a
verification that tried to reach Fulcio, Rekor or a TUF repository would fail loudly (the
child also records each attempt on stderr, which the tests assert is empty of them).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import THIRD_PARTY_VECTORS

VECTORS = THIRD_PARTY_VECTORS / "sigstore-python"
STAGING = VECTORS / "trusted_root.staging.json"
PRODUCTION = VECTORS / "trusted_root.production.json"
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
OAUTH_ISSUER = "https://github.com/login/oauth"

OFFLINE = """
import socket, sys

def _refuse(*args, **kwargs):
    sys.stderr.write("NETWORK ATTEMPT %r\\n" % (args[1:] or args,))
    raise OSError("network disabled in this test")

socket.socket.connect = _refuse
socket.socket.connect_ex = _refuse
socket.create_connection = _refuse
{extra}
from harness.verify.cli import main
main(sys.argv[1:])
"""


def verifier_offline(
    *args: str | Path, cwd: Path | None = None, extra: str = ""
) -> subprocess.CompletedProcess[str]:
    """``harness-verify ARGS`` in a child process with no network (and ``extra`` code run
    first, e.g. to hide the sigstore package)."""
    done = subprocess.run(
        [sys.executable, "-c", OFFLINE.format(extra=extra), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    assert "NETWORK ATTEMPT" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done
