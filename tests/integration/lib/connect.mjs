// Connect protocol pieces the tests speak to envd by hand (reference
// e2b-protocol.md: a 5-byte envelope, flags then a big-endian length).
import http from 'node:http';
import { createHash } from 'node:crypto';

export const envelope = (obj) => {
    const body = Buffer.from(JSON.stringify(obj));
    const h = Buffer.alloc(5);
    h.writeUInt32BE(body.length, 1);
    return Buffer.concat([h, body]);
};

// POST process.Process/Start with request options opts (host/port or
// socketPath, path, headers), read by a client that takes 16 KiB every 4 ms
// (a few MB/s, far below the pipe's speed), so envd's subscriber stays
// congested until the child has exited. Resolves {len, sha, exit, frames}:
// the stdout's length and SHA-256, the exit code, the frames read.
export function slowStart(opts, cmd, args) {
    return new Promise((resolve, reject) => {
        const req = http.request({ method: 'POST', highWaterMark: 16 * 1024, ...opts, headers: {
            'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1',
            ...opts.headers,
        } }, (res) => {
            if (res.statusCode !== 200) {
                reject(new Error(`Start: HTTP ${res.statusCode}`));
                res.resume();
                return;
            }
            const hash = createHash('sha256');
            let len = 0;
            let exit = null;
            let frames = 0;
            let buf = Buffer.alloc(0);
            const take = () => {
                for (;;) {
                    if (buf.length < 5) return;
                    const n = buf.readUInt32BE(1);
                    if (buf.length < 5 + n) return;
                    const flags = buf[0];
                    const msg = JSON.parse(buf.subarray(5, 5 + n).toString());
                    buf = buf.subarray(5 + n);
                    frames++;
                    if (flags & 2) {
                        if (msg.error) reject(new Error(`stream error: ${JSON.stringify(msg.error)}`));
                        continue;
                    }
                    const ev = msg.event || {};
                    if (ev.data && ev.data.stdout) {
                        const b = Buffer.from(ev.data.stdout, 'base64');
                        len += b.length;
                        hash.update(b);
                    }
                    if (ev.end) exit = ev.end.exitCode ?? 0;
                }
            };
            const pump = () => {
                let chunk;
                while ((chunk = res.read(16 * 1024)) !== null) {
                    buf = Buffer.concat([buf, chunk]);
                    take();
                    setTimeout(pump, 4);
                    return;
                }
                res.once('readable', pump);
            };
            res.once('readable', pump);
            res.on('end', () => {
                take();
                resolve({ len, sha: hash.digest('hex'), exit, frames });
            });
            res.on('error', reject);
        });
        req.on('error', reject);
        req.end(envelope({ process: { cmd, args } }));
    });
}
