"""Print pip pins that install the oldest versions pyproject.toml admits.

Every requirement of the project and of its test extra must carry a lower bound (``>=``);
each becomes ``name==bound``, so the floors CI tests are the floors the project declares.
Run from the repository root: ``python3 .ci/floors.py > floors.txt``.
"""

import re
import sys
import tomllib
from pathlib import Path

project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
pins = []
for requirement in project["dependencies"] + project["optional-dependencies"]["test"]:
    match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)(\s*,\s*<\s*[0-9][0-9A-Za-z.]*)?", requirement)
    if match is None:
        sys.exit(f"{requirement!r} declares no lower bound of the form 'name>=version': CI cannot test its floor")
    pins.append(f"{match[1]}=={match[2]}")
print("\n".join(pins))
