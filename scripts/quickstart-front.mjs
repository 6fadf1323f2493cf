// The quick start's stand-in for an ingress: HTTPS on loopback for the host
// form the E2B SDK builds from a domain (https://api.<domain>,
// https://<port>-<sandbox id>.<domain>). api.<domain> goes to the hub's E2B
// front door (/e2b), every other host to the hub's --data-listen with its
// Host kept (the hub reads <port>-<id> from it). The SDK has no plain-HTTP
// host form, hence TLS: a self-signed certificate for *.<domain>.
//
//   node scripts/quickstart-front.mjs LISTEN_PORT CERT KEY HUB_ADDR DATA_ADDR
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';

const [port, cert, key, hub, data] = process.argv.slice(2);
if (!data) {
    console.error('usage: quickstart-front.mjs LISTEN_PORT CERT KEY HUB_HOST:PORT DATA_HOST:PORT');
    process.exit(2);
}
const split = (a) => ({ host: a.slice(0, a.lastIndexOf(':')), port: Number(a.slice(a.lastIndexOf(':') + 1)) });
const server = https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) }, (req, res) => {
    const api = (req.headers.host || '').startsWith('api.');
    const to = split(api ? hub : data);
    const up = http.request({ ...to, method: req.method, path: api ? `/e2b${req.url}` : req.url, headers: req.headers }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        ur.pipe(res);
    });
    up.on('error', (e) => {
        if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ code: 502, message: `quickstart front: ${api ? 'hub' : 'hub data listener'} did not answer: ${e.code}` }));
    });
    req.pipe(up);
});
server.listen(Number(port), '127.0.0.1', () => console.log(`quickstart front on https://127.0.0.1:${port}`));
process.on('SIGTERM', () => process.exit(0));
