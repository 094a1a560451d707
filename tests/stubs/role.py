"""A stub role command for pipeline tests: behaves as told by its first argument.

ok                 print a harmless report
deviation          print a `deviation: major` line (orient)
deviation-json     print a JSON verdict with "deviation": "major"
critical-once F    print a CRITICAL finding the first time (state in file F), then a clean review
crash-once F       exit 1 the first time (state in file F), then a clean review
crash              always exit 2
score S            print a JSON verdict {"pass": false, "score": S}
"""

import json
import sys
from pathlib import Path

mode = sys.argv[1]
state = Path(sys.argv[2]) if len(sys.argv) > 2 else None


def first_time() -> bool:
    if state.exists():
        return False
    state.write_text("seen\n")
    return True


if mode == "ok":
    print("looked at it: fine")
elif mode == "deviation":
    print("the plan assumes a REST API\ndeviation: major (the code base moved to gRPC)")
elif mode == "deviation-json":
    print(json.dumps({"deviation": "major", "reason": "the module was deleted"}))
elif mode == "critical-once":
    print("\N{LARGE RED CIRCLE} the parser drops the last token" if first_time() else "minor: naming")
elif mode == "crash-once":
    if first_time():
        sys.exit(1)
    print("reviewed after a retry")
elif mode == "crash":
    print("reviewer exploded", file=sys.stderr)
    sys.exit(2)
elif mode == "score":
    print(json.dumps({"pass": False, "score": float(sys.argv[2]), "reasons": ["not yet"]}))
else:
    sys.exit(f"unknown mode {mode}")
