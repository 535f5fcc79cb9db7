#!/usr/bin/env python3
# The minimal `--pipe` handler on examples/pipe/pelican_pipe.py: a function that acks. For
# scripts/measure-pipe (run with examples/pipe on PYTHONPATH).
import pelican_pipe

pelican_pipe.run(lambda entry: None)
