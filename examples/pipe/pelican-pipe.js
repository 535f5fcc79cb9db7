// The read-answer loop of a `pelican consume --pipe` handler in Node.js (no packages), so that
// a handler is one function:
//
//   const pipe = require("./pelican-pipe");
//   pipe.run(async (entry) => {
//     // entry: {stream, id, fields, deliveries, source}
//     await work(entry);
//     // Return nothing (or "ack") to acknowledge it; "retry", or throw, to leave it pending
//     // (it comes back); "dead-letter", or throw a pipe.DeadLetter, to set it aside (with
//     // --dead-letter); or an object: {verdict: "ack", emit: [...], writes: [...]}.
//   });
//
// pelican offers batches (PELICAN_PIPE_PROTOCOL=batch in the environment) and this loop takes
// them: a batch comes as one line, {"batch":7,"entries":[...]}, and is answered by one line,
// {"batch":7,"verdicts":["ack",...]}, for every entry handled at once (a function that returns
// a value, not a promise); an entry whose promise is still pending is answered on a line of its
// own as it settles ({"stream":…,"id":…,"verdict":…}), so a slow one holds up no other. Under a
// pelican that does not offer batches, each entry comes and is answered on a line of its own.
// process.stdout.write into a pipe is made at once on Linux (queued, and made as soon as it can,
// elsewhere): nothing to flush. Logs go to stderr (console.error), never to stdout.

"use strict";

const readline = require("node:readline");

/** Thrown by a handler: this entry can never be processed; it goes to --dead-letter. */
class DeadLetter extends Error {}

const HELLO = '{"protocol":"batch"}\n';

function member(verdict) {
  if (verdict === undefined || verdict === null) return "ack";
  if (typeof verdict === "object" && !("verdict" in verdict)) return { ...verdict, verdict: "ack" };
  return verdict;
}

function failed(entry, err) {
  if (err instanceof DeadLetter) {
    console.error(`pelican-pipe: ${entry.id}: dead-letter: ${err.message}`);
    return "dead-letter";
  }
  console.error(`pelican-pipe: ${entry.id}: failed, it stays pending: ${err && err.stack ? err.stack : err}`);
  return "retry";
}

/** Answers `entry` on a line of its own. */
function answer(entry, verdict) {
  const m = member(verdict);
  const reply = typeof m === "object" ? { ...m } : { verdict: m };
  reply.stream = entry.stream;
  reply.id = entry.id;
  process.stdout.write(JSON.stringify(reply) + "\n");
}

/** Runs `handle(entry)` (a function or an async function) for every entry until stdin closes. */
function run(handle) {
  if ((process.env.PELICAN_PIPE_PROTOCOL || "").split(",").includes("batch")) {
    process.stdout.write(HELLO);
  }
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  lines.on("line", (line) => {
    if (!line.trim()) return;
    const message = JSON.parse(line);
    const batch = Array.isArray(message.entries) && message.batch !== undefined;
    const entries = batch ? message.entries : [message];
    // A verdict now, or null: answered later, on its own line.
    const verdicts = entries.map((entry) => {
      let verdict;
      try {
        verdict = handle(entry);
      } catch (err) {
        return failed(entry, err);
      }
      if (verdict && typeof verdict.then === "function") {
        verdict.then(
          (v) => answer(entry, v),
          (err) => answer(entry, failed(entry, err)),
        );
        return null;
      }
      return member(verdict);
    });
    if (!batch) {
      if (verdicts[0] !== null) answer(message, verdicts[0]);
    } else if (verdicts.some((v) => v !== null)) {
      process.stdout.write(JSON.stringify({ batch: message.batch, verdicts }) + "\n");
    }
  });
}

module.exports = { run, answer, DeadLetter };
