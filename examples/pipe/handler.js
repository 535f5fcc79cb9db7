#!/usr/bin/env node
// A `pelican consume --pipe` handler in Node.js (no packages).
//
// pelican starts it once and keeps it. Each entry arrives on stdin as one JSON line:
//   {"stream":"orders","id":"1700000000000-0","fields":{...},"deliveries":1,"source":"new"}
// and is answered on stdout with one JSON line, in any order:
//   {"stream":"orders","id":"1700000000000-0","verdict":"ack"}   (or "retry", or "dead-letter")
// ("stream" is needed only when several streams are consumed; echoing it is always right).
//
//   pelican consume --stream orders --group billing --consumer w1 --create-group \
//       --pipe 'node examples/pipe/handler.js' --concurrency 64
//
// Each entry is handled asynchronously, so with --concurrency above 1 answers go back in the
// order the work finishes, not the order the entries came. HANDLER_SLOW_MS makes each entry
// take up to that long (a random share of it); HANDLER_FAIL names a field whose entries get
// "retry".

"use strict";

const readline = require("node:readline");

const SLOW = Number(process.env.HANDLER_SLOW_MS || 0);
const FAIL = process.env.HANDLER_FAIL;

// Real work goes here: a database write, a model call, an HTTP request.
async function handle(entry) {
  if (SLOW > 0) {
    await new Promise((done) => setTimeout(done, Math.random() * SLOW));
  }
  const fields = entry.fields || {};
  return FAIL && Object.prototype.hasOwnProperty.call(fields, FAIL) ? "retry" : "ack";
}

// One line per answer, written as it is made: Node holds nothing back waiting for a flush (a
// write to a pipe is made at once on Linux, queued and made as soon as it can be elsewhere),
// unlike Python's print into a pipe. Logs go to stderr (console.error), never to stdout.
function answer(entry, verdict) {
  process.stdout.write(JSON.stringify({ stream: entry.stream, id: entry.id, verdict }) + "\n");
}

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  let entry;
  try {
    entry = JSON.parse(line);
  } catch (e) {
    console.error(`handler.js: not JSON, skipped: ${line.slice(0, 200)}`);
    return;
  }
  handle(entry).then(
    (verdict) => answer(entry, verdict),
    // A failure of the work is a retry: the entry stays pending and comes again.
    (err) => {
      console.error(`handler.js: ${entry.id}: ${err}`);
      answer(entry, "retry");
    },
  );
});
// stdin closed: pelican is stopping, and has waited for every answer. Node exits once the
// answers written are flushed.
