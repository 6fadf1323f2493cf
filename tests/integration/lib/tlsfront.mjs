// An HTTPS front on loopback for clients that only speak the host form
// (`https://api.<domain>`, `https://<port>-<sandbox id>.<domain>`): the e2b
// 1.x SDK has no E2B_API_URL / E2B_SANDBOX_URL. A self-signed certificate
// for *.<domain>, names under <domain> resolved to 127.0.0.1 in this process
// (dns.lookup, which fetch uses), `api.` hosts proxied to the E2B API and
// every other host to the data plane with its Host kept (the data plane reads
// <port>-<id> from it). Nothing leaves the machine.
import dns from 'node:dns';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { run, tempDir } from './harness.mjs';

const origLookup = dns.lookup;
const suffixes = new Set();

// Names equal to or under suffix resolve to 127.0.0.1 in this process.
export function resolveToLoopback(suffix) {
    suffixes.add(suffix);
    if (dns.lookup !== origLookup) return;
    dns.lookup = (host, opts, cb) => {
        if (typeof opts === 'function') {
            cb = opts;
            opts = {};
        }
        const mine = [...suffixes].some((s) => host === s || host.endsWith(`.${s}`));
        if (!mine) return origLookup(host, opts, cb);
        if (opts && opts.all) return cb(null, [{ address: '127.0.0.1', family: 4 }]);
        return cb(null, '127.0.0.1', 4);
    };
}

export async function startTlsFront({ domain, api, data }) {
    const dir = tempDir('agentbox-tls-');
    const key = path.join(dir, 'key.pem');
    const cert = path.join(dir, 'cert.pem');
    const r = await run('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert,
        '-days', '1', '-subj', `/CN=${domain}`, '-addext', `subjectAltName=DNS:*.${domain},DNS:${domain}`]);
    if (r.code !== 0) throw new Error(`openssl: ${r.stderr}`);
    resolveToLoopback(domain);
    const server = https.createServer({ key: fs.readFileSync(key), cert: fs.readFileSync(cert) }, (req, res) => {
        const host = req.headers.host || '';
        const pick = host.startsWith('api.') ? api : data; // a URL, or a function giving one later
        const to = new URL(typeof pick === 'function' ? pick() : pick);
        const up = http.request({
            host: to.hostname, port: to.port, method: req.method, path: req.url, headers: req.headers,
        }, (ur) => {
            res.writeHead(ur.statusCode, ur.headers);
            ur.pipe(res);
        });
        up.on('error', () => res.destroy());
        req.pipe(up);
    });
    await new Promise((res) => server.listen(0, '127.0.0.1', res));
    const port = server.address().port;
    return {
        port,
        domain: `${domain}:${port}`, // what the SDK is given: its URLs then carry the port
        cert,
        close: async () => {
            server.closeAllConnections();
            await new Promise((res) => server.close(res));
            fs.rmSync(dir, { recursive: true, force: true });
        },
    };
}
