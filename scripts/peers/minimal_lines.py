#!/usr/bin/env python3
# The minimal `--pipe` handler written as before batches: one line read, one answer written and
# flushed, per entry. For scripts/measure-pipe.
import json
import sys

for line in sys.stdin:
    print(json.dumps({"id": json.loads(line)["id"], "verdict": "ack"}), flush=True)
