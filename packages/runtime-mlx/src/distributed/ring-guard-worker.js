/**
 * The worker thread of ring-guard.ts (read that first): it holds the ring's public addresses, checks
 * every connection's proof of the launch secret, and relays the proven ones to MLX's loopback ports.
 * A thread of its own because MLX can block the JS thread (an eval waits when too many tasks are in
 * flight) while the bytes it waits for would have to pass through this relay. Plain JavaScript, so
 * that the same file runs from the sources (tests) and from dist/ without a TypeScript loader.
 *
 * Messages: in workerData { rank, addresses, secret }; to the parent { listening, mlxAddresses,
 * mlxPorts } | { setupFailed, message } | { refused } | { joined } | { failed, message }; from the
 * parent "mlx-joining" (connect to MLX's ports now), "mlx-joined" (MLX's join succeeded: relay),
 * "flush" (answered { flushed } once what MLX sent so far is out of this thread) and "close".
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { connect, createServer } from "node:net";
import { parentPort, workerData } from "node:worker_threads";

const MAGIC = Buffer.from("ANMLRNG1");
const NONCE = 32;
const MAC = 32;
/** A connection that has not proved the secret by then is dropped. */
const HANDSHAKE_MS = 10_000;
/** Unproven connections held at once per address (a flood beyond is dropped at once). */
const MAX_PENDING = 16;
const RETRY_MS = 200;

const { rank, addresses, secret: secretBytes } = workerData;
const secret = Buffer.from(secretBytes);
const size = addresses.length;
const prevRank = (rank + size - 1) % size;
const nextRank = (rank + 1) % size;
const sockets = new Set();
const servers = [];
/** The relayed sockets to other ranks (what MLX sends leaves through them). */
const toRanks = [];
let closed = false;
let failure;

const post = (m) => parentPort.postMessage(m);

function fail(message) {
  if (failure || closed) return;
  failure = message;
  post({ failed: true, message });
}

function track(s) {
  sockets.add(s);
  s.once("close", () => sockets.delete(s));
  return s;
}

const mac = (role, cn, sn, binding) =>
  createHmac("sha256", secret).update(role).update(cn).update(sn).update(binding).digest();

/** "10.0.0.1:5000" → { host, port } */
function split(address) {
  const at = address.lastIndexOf(":");
  return { host: address.slice(0, at), port: Number(address.slice(at + 1)) };
}

/** Exactly `n` bytes from `s` (what follows stays in the socket), or a rejection when it closes first. */
function readExactly(s, n) {
  return new Promise((resolve, reject) => {
    let got = Buffer.alloc(0);
    const done = (err) => {
      s.off("data", onData);
      s.off("close", onClose);
      s.off("error", onClose);
      s.pause();
      if (err) reject(err);
    };
    const onData = (chunk) => {
      got = Buffer.concat([got, chunk]);
      if (got.length < n) return;
      done();
      if (got.length > n) s.unshift(got.subarray(n));
      resolve(got.subarray(0, n));
    };
    const onClose = () => done(new Error("closed during the handshake"));
    s.on("data", onData);
    s.once("close", onClose);
    s.once("error", onClose);
    s.resume();
  });
}

function within(p, ms, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took over ${ms / 1000} s`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function listen(server, host, port) {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen({ host, port }, () => {
      server.off("error", reject);
      resolve();
    });
  });
}

/** A port on 127.0.0.1 that is free now (for MLX to listen on). */
async function freeLoopbackPort() {
  const s = createServer();
  await listen(s, "127.0.0.1", 0);
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

/** Relays two sockets both ways; when either ends or fails both close (MLX then sees its peer gone). */
function relay(a, b) {
  const close = () => {
    a.destroy();
    b.destroy();
  };
  for (const s of [a, b]) {
    s.setNoDelay(true);
    s.on("error", close);
    s.on("close", close);
  }
  a.pipe(b);
  b.pipe(a);
}

/** The server side of the proof: the client's hello, our nonce and proof, then the client's proof. */
async function proveServer(s, binding) {
  const hello = await readExactly(s, MAGIC.length + NONCE);
  if (!hello.subarray(0, MAGIC.length).equals(MAGIC))
    throw new Error("no handshake (not a rank of this ring)");
  const cn = hello.subarray(MAGIC.length);
  const sn = randomBytes(NONCE);
  s.write(Buffer.concat([MAGIC, sn, mac("server", cn, sn, binding)]));
  const proof = await readExactly(s, MAC);
  if (!timingSafeEqual(proof, mac("client", cn, sn, binding)))
    throw new Error("could not prove the launch's secret");
}

/** The first connection on `server` that proves the secret: the previous rank's connection `channel`. */
function acceptProven(server, channel) {
  const binding = `ring:${prevRank}->${rank}#${channel}`;
  return new Promise((resolve) => {
    let pending = 0;
    let won = false;
    server.on("connection", (s) => {
      track(s);
      const who = `${s.remoteAddress}:${s.remotePort}`;
      if (won || pending >= MAX_PENDING) {
        s.destroy();
        return;
      }
      pending++;
      within(proveServer(s, binding), HANDSHAKE_MS, "the handshake")
        .then(() => {
          if (won) throw new Error("the connection is already taken");
          won = true;
          resolve(s);
        })
        .catch((err) => {
          post({ refused: `${who} on ${addresses[rank][channel]}: ${err.message}` });
          s.destroy();
        })
        .finally(() => pending--);
    });
  });
}

/** Our connection `channel` to the next rank, proven both ways; retried until it is, or we close. */
async function connectProven(address, channel) {
  const binding = `ring:${rank}->${nextRank}#${channel}`;
  const { host, port } = split(address);
  let told = false;
  while (!closed) {
    const s = track(connect({ host, port }));
    try {
      await within(
        new Promise((resolve, reject) => {
          s.once("connect", resolve);
          s.once("error", reject);
        }),
        HANDSHAKE_MS,
        "connecting",
      );
      const cn = randomBytes(NONCE);
      s.write(Buffer.concat([MAGIC, cn]));
      const answer = await within(readExactly(s, MAGIC.length + NONCE + MAC), HANDSHAKE_MS, "the handshake");
      const sn = answer.subarray(MAGIC.length, MAGIC.length + NONCE);
      const proof = answer.subarray(MAGIC.length + NONCE);
      if (
        !answer.subarray(0, MAGIC.length).equals(MAGIC) ||
        !timingSafeEqual(proof, mac("server", cn, sn, binding))
      ) {
        if (!told)
          post({
            refused: `${address} (rank ${nextRank}'s address) answered, but could not prove the launch's secret`,
          });
        told = true;
        throw new Error("unproven");
      }
      s.write(mac("client", cn, sn, binding));
      return s;
    } catch {
      s.destroy();
      await sleep(RETRY_MS);
    }
  }
  throw new Error("closed");
}

/** Connects to MLX's listening port as soon as it listens (so that MLX's one accept is ours). */
async function connectMlx(port) {
  while (!closed) {
    const s = track(connect({ host: "127.0.0.1", port }));
    const ok = await new Promise((resolve) => {
      s.once("connect", () => resolve(true));
      s.once("error", () => resolve(false));
    });
    if (ok) {
      s.pause();
      return s;
    }
    s.destroy();
    await sleep(20);
  }
  throw new Error("closed");
}

/**
 * Waits until what MLX has sent so far has left this thread: bytes still here when the process ends
 * would be lost (MLX's own sockets would have left them to the kernel). MLX's send finished before
 * the parent asked, so two turns of the loop read it; then the writes drain (bounded).
 */
async function flush() {
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
  const until = Date.now() + 5_000;
  while (toRanks.some((s) => !s.destroyed && s.writableLength > 0) && Date.now() < until) await sleep(5);
}

const handled = (p) => {
  p.catch(() => {});
  return p;
};

async function main() {
  const publicServers = [];
  for (const address of addresses[rank]) {
    const { host, port } = split(address);
    const server = createServer({ pauseOnConnect: true });
    try {
      await listen(server, host, port);
    } catch (err) {
      post({
        setupFailed: true,
        message: `rank ${rank} cannot listen on ${address} for rank ${prevRank}: ${err.message}`,
      });
      return;
    }
    publicServers.push(server);
  }
  const loopback = [];
  for (let i = 0; i < addresses[nextRank].length; i++) {
    const server = createServer({ pauseOnConnect: true });
    await listen(server, "127.0.0.1", 0);
    loopback.push(server);
  }
  servers.push(...publicServers, ...loopback);
  const mlxPorts = [];
  for (let i = 0; i < addresses[rank].length; i++) mlxPorts.push(await freeLoopbackPort());
  const own = mlxPorts.map((p) => `127.0.0.1:${p}`);
  const outs = loopback.map((s) => `127.0.0.1:${s.address().port}`);
  // MLX uses only its own entry and the next rank's; the others just have to parse
  const mlxAddresses = addresses.map((_, r) => (r === nextRank ? outs : own));

  const incoming = publicServers.map((server, i) => handled(acceptProven(server, i)));
  const fromMlx = loopback.map((server) =>
    handled(
      new Promise((resolve) => {
        server.once("connection", (s) => {
          server.close(); // MLX connects once; nobody after it
          track(s).pause();
          resolve(s);
        });
      }),
    ),
  );
  const outgoing = addresses[nextRank].map((address, i) => handled(connectProven(address, i)));
  let toMlx = [];
  let mlxJoined;
  const joined = new Promise((resolve) => {
    mlxJoined = resolve;
  });
  parentPort.on("message", (m) => {
    if (m === "mlx-joining") {
      toMlx = mlxPorts.map((port) => handled(connectMlx(port)));
    } else if (m === "mlx-joined") {
      mlxJoined();
    } else if (m === "flush") {
      flush().then(() => post({ flushed: true }));
    } else if (m === "close") {
      closed = true;
      for (const s of servers) s.close();
      for (const s of sockets) s.destroy();
      process.exit(0);
    }
  });
  post({ listening: true, mlxAddresses, mlxPorts });

  // nothing is relayed before MLX's own join succeeded: a process that raced MLX for a loopback
  // port (MLX then fails to join) never reaches another rank
  await joined;
  const [mlxIn, prev, mlxOut, next] = await Promise.all([
    Promise.all(toMlx),
    Promise.all(incoming),
    Promise.all(fromMlx),
    Promise.all(outgoing),
  ]);
  // had MLX accepted another process instead of us, our connection is reset as its listener closes
  await sleep(50);
  if (mlxIn.some((s) => s.destroyed)) {
    fail("another process took the local port MLX listened on during the join");
    return;
  }
  for (const s of servers) s.close(); // the ring is complete: no more connections
  prev.forEach((s, i) => {
    relay(s, mlxIn[i]);
  });
  next.forEach((s, i) => {
    relay(mlxOut[i], s);
  });
  toRanks.push(...prev, ...next);
  post({ joined: true });
}

main().catch((err) => fail(err.message));
