#!/usr/bin/env node
// A `pelican consume --pipe` handler in Node.js (no packages), on pelican-pipe.js.
//
// pelican starts it once and keeps it. `handle(entry)` is called for each entry:
//   {"stream":"orders","id":"1700000000000-0","fields":{...},"deliveries":1,"source":"new"}
// and what it returns (or what its promise resolves to) is the entry's verdict: "ack" (or
// nothing), "retry", "dead-letter", or an ack carrying writes. pelican-pipe.js runs the loop the
// fast way: the entries come in batches, one JSON line each; those handled at once are answered
// by one line of verdicts, those handled asynchronously each on a line of its own as it ends,
// in the order the work finishes (see pelican-pipe.js, and the --pipe section of cli/README.md).
//
//   pelican consume --stream orders --group billing --consumer w1 --create-group \
//       --pipe 'node examples/pipe/handler.js'
//
// HANDLER_SLOW_MS makes each entry take up to that long (a random share of it, asynchronously:
// entries overlap); HANDLER_FAIL names a field whose entries get "retry".

"use strict";

const pipe = require("./pelican-pipe");

const SLOW = Number(process.env.HANDLER_SLOW_MS || 0);
const FAIL = process.env.HANDLER_FAIL;

// Real work goes here: a database write, a model call, an HTTP request. Logs go to stderr
// (console.error), never to stdout.
function handle(entry) {
  const fields = entry.fields || {};
  const verdict = FAIL && Object.prototype.hasOwnProperty.call(fields, FAIL) ? "retry" : "ack";
  if (SLOW > 0) {
    return new Promise((done) => setTimeout(() => done(verdict), Math.random() * SLOW));
  }
  return verdict;
}

pipe.run(handle);
// stdin closed: pelican is stopping, and has waited for every answer. Node exits once the
// answers written are flushed.
