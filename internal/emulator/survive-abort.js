// survive-abort.js keeps dynalite alive when a client gives up on a request
// while sending it (a call cancelled by its context): dynalite 4.0.0
// rethrows the request's 'aborted' error from its listener
// (index.js: req.on('error', function (err) { throw err })), and the
// uncaught exception ended the process. DynamoDB drops such a request; so
// does dynalite with this preloaded (`node -r ./survive-abort.js`). Any
// other uncaught exception still ends the process, as node's default does.
'use strict';

process.on('uncaughtException', (err) => {
  if (err && err.code === 'ECONNRESET' && err.message === 'aborted') {
    process.stderr.write('survive-abort: a client aborted a request; dropped\n');
    return;
  }
  process.stderr.write(((err && err.stack) || String(err)) + '\n');
  process.exit(1);
});
