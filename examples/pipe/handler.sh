#!/bin/sh
# A `pelican consume --pipe` handler in POSIX shell: acknowledges every entry, in order.
# It takes the id out of each line with the shell's own expansions (ids are digits and a dash,
# always first after "id"): no sed, no subprocess per entry, which would cost a fork each. Real
# work goes where the comment is. printf is the shell's own and writes each answer at once
# (nothing to flush); a program run here that answers for it must flush its stdout. Logs go
# to stderr (>&2), never to stdout. It says nothing first, so pelican sends it one entry per
# line; a handler that takes batches (pelican_pipe.py, pelican-pipe.js) costs one parse and one
# write per batch instead — in shell, `jq` can do that:
#   printf '{"protocol":"batch"}\n'
#   exec jq -c --unbuffered 'if .batch then {batch, verdicts: [.entries[] | "ack"]} else {id, verdict: "ack"} end'
#   pelican consume --stream orders --group g --consumer w1 --pipe 'sh examples/pipe/handler.sh'
while IFS= read -r line; do
  id=${line#*\"id\":\"}
  id=${id%%\"*}
  # ... handle "$line" here ...
  printf '{"id":"%s","verdict":"ack"}\n' "$id"
done
