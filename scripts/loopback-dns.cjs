// Preloaded by the quick start's URL settings (NODE_OPTIONS=--require ...):
// names under AGENTBOX_LOOPBACK_DOMAIN (default agentbox.localhost) resolve to
// 127.0.0.1 in this Node process. Node asks the system resolver, which does
// not map *.localhost to loopback on every machine (curl does it itself).
const dns = require('node:dns');
const suffix = (process.env.AGENTBOX_LOOPBACK_DOMAIN || 'agentbox.localhost').replace(/:\d+$/, '');
const orig = dns.lookup;
dns.lookup = function lookup(host, opts, cb) {
    if (typeof opts === 'function') {
        cb = opts;
        opts = {};
    }
    if (host !== suffix && !String(host).endsWith(`.${suffix}`)) return orig.call(dns, host, opts, cb);
    if (opts && opts.all) return process.nextTick(cb, null, [{ address: '127.0.0.1', family: 4 }]);
    return process.nextTick(cb, null, '127.0.0.1', 4);
};
