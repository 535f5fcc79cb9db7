#!/bin/sh
# A `pelican consume --pipe` handler in POSIX shell: acknowledges every entry, in order.
# It picks the id out of each line with sed (ids are digits and a dash, always first after
# "id"); real work goes where the comment is. printf is the shell's own and writes each answer
# at once (nothing to flush); a program run here that answers for it must flush its stdout.
# Logs go to stderr (>&2), never to stdout.
#   pelican consume --stream orders --group g --consumer w1 --pipe 'sh examples/pipe/handler.sh'
while IFS= read -r line; do
  id=$(printf '%s\n' "$line" | sed -n 's/.*"id":"\([0-9-]*\)".*/\1/p')
  # ... handle "$line" here ...
  printf '{"id":"%s","verdict":"ack"}\n' "$id"
done
