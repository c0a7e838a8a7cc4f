"""Package layout (DESIGN §2): top-level folders become sub-packages of ``harness``.

``harness.verify`` lives in ``verify/``, ``harness.receipts`` in ``receipts/``, ... Every
sub-package below them is discovered, so a new one is never silently left out of the wheel.
"""

from setuptools import find_packages, setup

ROOTS = {
    "harness": "src/harness",
    "harness.verify": "verify",
    "harness.receipts": "receipts",
    "harness.orchestrate": "orchestrate",
    "harness.schemas": "schemas",
}

packages = []
for name, folder in ROOTS.items():
    packages.append(name)
    packages.extend(f"{name}.{sub}" for sub in find_packages(folder))

setup(packages=packages, package_dir=ROOTS)
