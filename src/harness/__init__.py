"""harness-verify: offline verification and compliance toolkit for AI coding-agent harnesses.

This umbrella package stays tiny on purpose: importing ``harness.verify`` imports this
module first, and the verifier must not pull in anything of the runtime.
"""

__version__ = "0.1.0"
