// bind-localhost.js keeps an emulator on the loopback interface. Preload it
// with `node -r ./bind-localhost.js ...`: every net.Server (and so every
// http, https and http2 server) that would listen on all interfaces (no host,
// 0.0.0.0 or ::) listens on 127.0.0.1 instead. Unix sockets and explicit
// hosts are left alone.
'use strict';

const net = require('net');

const LOOPBACK = '127.0.0.1';
const WILDCARDS = new Set(['', '0.0.0.0', '::', '0:0:0:0:0:0:0:0', '::0']);

function isWildcard(host) {
  return host === undefined || host === null || WILDCARDS.has(host);
}

function isPort(v) {
  return typeof v === 'number' || (typeof v === 'string' && /^\d+$/.test(v));
}

const listen = net.Server.prototype.listen;

net.Server.prototype.listen = function bindLocalhost(...args) {
  const first = args[0];
  if (args.length === 0 || typeof first === 'function') {
    // listen() or listen(callback): a random port on all interfaces.
    args.unshift(0, LOOPBACK);
  } else if (isPort(first)) {
    // listen(port[, host][, backlog][, callback])
    if (typeof args[1] !== 'string') {
      args.splice(1, 0, LOOPBACK);
    } else if (isWildcard(args[1])) {
      args[1] = LOOPBACK;
    }
  } else if (first !== null && typeof first === 'object' &&
             first.path === undefined && first.fd === undefined &&
             first.handle === undefined && first._handle === undefined &&
             isWildcard(first.host)) {
    // listen(options[, callback]) with a TCP port.
    args[0] = Object.assign({}, first, { host: LOOPBACK });
  }
  return listen.apply(this, args);
};
