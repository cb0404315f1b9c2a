/**
 * Who may use the server, checked in one onRequest hook before any route runs:
 *
 * - **Host** (DNS rebinding): a web page whose name resolves to 127.0.0.1 reaches a loopback server
 *   with its own name in `Host`. So a server listening on loopback answers only loopback names
 *   (`localhost` and `*.localhost`, 127.0.0.0/8, `::1`) and the names in `allowedHosts`; listening
 *   beyond loopback (where an API key is required) it answers any Host unless `allowedHosts` is set,
 *   and then those, the loopback names and the address it listens on.
 * - **Origin** (CORS): browsers send the page's `Origin` with every cross-origin request (and with
 *   same-origin POSTs; this server serves no pages). Only the `corsOrigins` may call: they get CORS
 *   headers and preflight answers, any other Origin gets 403 before the request does anything.
 *   Requests without an Origin (curl, the OpenAI SDKs, other servers) are not affected.
 * - **API keys**: with `apiKeys`, every route but `/health` needs `Authorization: Bearer <key>`,
 *   compared in constant time. The key a request used is its client identity: its partition of
 *   each model's prompt cache (`req.anemll.client`).
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { ApiError, logSafe, ServerConfigError } from "./errors.js";

export interface AccessOptions {
  /** Keys clients send as `Authorization: Bearer <key>`; each is one client (empty: no key needed). */
  apiKeys: readonly string[];
  /** Host names answered besides the loopback ones (`"*"`: any); see the file comment. */
  allowedHosts?: readonly string[];
  /** Origins (`scheme://host[:port]`) whose web pages may call the server (`"*"`: any page). */
  corsOrigins?: readonly string[];
}

/** The prompt-cache partition of a request made with the i-th API key. */
export const keyClient = (i: number) => `key${i}`;

/** The headers a preflight allows when it names none. */
const CORS_ALLOW_HEADERS = "authorization, content-type";
const CORS_EXPOSE_HEADERS = "retry-after";
/** How long a browser may reuse a preflight answer (seconds). */
const CORS_MAX_AGE = "600";

/**
 * Registers the checks. `boundHost()` is the address the server listens on (or will: the checks
 * also serve `app.inject()`), which decides the default Host rule.
 */
export function registerAccess(app: FastifyInstance, o: AccessOptions, boundHost: () => string): void {
  const keys = o.apiKeys.map(digest);
  const hosts = new Set((o.allowedHosts ?? []).map(hostEntry));
  const anyHost = hosts.has("*");
  const origins = new Set((o.corsOrigins ?? []).map(originEntry));
  const anyOrigin = origins.has("*");

  app.addHook("onRequest", async (req, reply) => {
    // 1. Host: the name the client used to reach us
    const name = parseHost(req.headers.host)?.name;
    const bound = boundHost();
    const hostOk =
      anyHost ||
      (name !== undefined &&
        (isLoopbackName(name) ||
          hosts.has(name) ||
          name === parseHost(bound)?.name ||
          (hosts.size === 0 && !isLoopbackHost(bound))));
    if (!hostOk) {
      throw new ApiError(
        403,
        `Host "${logSafe(req.headers.host ?? "", 100)}" is not allowed: this server answers to ` +
          `${[...listedHosts(bound, hosts)].join(", ")} (another name could be a web page's, ` +
          "reaching it through DNS rebinding); add a name with --allowed-host",
        { code: "host_not_allowed" },
      );
    }

    // 2. Origin: which web page (if any) sent the request
    const origin = req.headers.origin;
    if (origin !== undefined) {
      const normal = normalOrigin(origin);
      if (!anyOrigin && (normal === undefined || !origins.has(normal))) {
        throw new ApiError(
          403,
          `Origin "${logSafe(origin, 100)}" is not allowed: web pages may call this server only ` +
            "from the origins given with --cors-origin",
          { code: "origin_not_allowed" },
        );
      }
      // set on the raw response, so that streams and errors written past fastify carry them too
      reply.raw.setHeader("access-control-allow-origin", origin);
      reply.raw.setHeader("vary", "Origin");
      reply.raw.setHeader("access-control-expose-headers", CORS_EXPOSE_HEADERS);
      if (req.method === "OPTIONS" && req.headers["access-control-request-method"] !== undefined) {
        return preflight(req, reply);
      }
    }

    // 3. API key: who the client is (health checks need none; they reveal no model output)
    if (keys.length === 0 || req.url.split("?")[0] === "/health") return;
    const m = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? "");
    const i = m ? matchKey(m[1].trim(), keys) : -1;
    if (i < 0) {
      throw new ApiError(
        401,
        m
          ? "Incorrect API key provided."
          : "Missing API key: send it as `Authorization: Bearer <key>` (the server was started with --api-key).",
        { type: "authentication_error", code: "invalid_api_key" },
      );
    }
    req.anemll.client = keyClient(i);
  });
}

/**
 * A CORS preflight from an allowed origin: what the real request may carry (the headers it asks
 * for: the origin is trusted, and the OpenAI SDKs send several of their own).
 */
function preflight(req: FastifyRequest, reply: FastifyReply): FastifyReply {
  const asked = req.headers["access-control-request-headers"];
  return reply
    .code(204)
    .header("access-control-allow-methods", "GET, POST, OPTIONS")
    .header("access-control-allow-headers", typeof asked === "string" && asked ? asked : CORS_ALLOW_HEADERS)
    .header("access-control-max-age", CORS_MAX_AGE)
    .header("vary", "Origin, Access-Control-Request-Headers")
    .send();
}

/**
 * True when `host` (an address or name to listen on) is this machine only: `localhost`,
 * 127.0.0.0/8, `::1` (also written `[::1]` or `::ffff:127.x.x.x`).
 */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase().replace(/^\[(.*)\]$/, "$1");
  return h === "localhost" || h === "::1" || /^(::ffff:)?127\.\d+\.\d+\.\d+$/.test(h);
}

/** Loopback names a rebinding page cannot take: `localhost`, `*.localhost` (RFC 6761), loopback IPs. */
function isLoopbackName(name: string): boolean {
  return name.endsWith(".localhost") || isLoopbackHost(name);
}

/** The names a Host check accepts, for the refusal's message. */
function listedHosts(bound: string, hosts: Set<string>): Set<string> {
  return new Set(["localhost", "127.0.0.1", "[::1]", ...(isLoopbackHost(bound) ? [] : [bound]), ...hosts]);
}

/** A Host header's (or host entry's) name, lowercase, IPv6 in brackets, and its port ("" if none). */
function parseHost(s: string | undefined): { name: string; port: string } | undefined {
  if (!s) return undefined;
  try {
    const u = new URL(`http://${s}`);
    if (u.username || u.password || u.pathname !== "/" || u.search || u.hash || !u.hostname) return undefined;
    return { name: u.hostname.replace(/\.$/, ""), port: u.port };
  } catch {
    return undefined;
  }
}

/** An --allowed-host entry: a host name or address without a port, or "*". */
function hostEntry(entry: string): string {
  if (entry === "*") return entry;
  const h = parseHost(entry);
  if (h?.port !== "") {
    throw new ServerConfigError(
      `allowed host "${entry}" is not a host name or address (give it without a scheme, port or path, e.g. myhost.lan)`,
    );
  }
  return h.name;
}

/** `scheme://host[:port]`, lowercase and without a default port, or undefined for anything else (`null`). */
function normalOrigin(origin: string): string | undefined {
  try {
    const u = new URL(origin);
    if (u.username || u.password || !["", "/"].includes(u.pathname) || u.search || u.hash || !u.host)
      return undefined;
    return `${u.protocol}//${u.host}`;
  } catch {
    return undefined;
  }
}

/** A --cors-origin entry: an origin as browsers send it, or "*". */
function originEntry(entry: string): string {
  if (entry === "*") return entry;
  const normal = normalOrigin(entry);
  if (normal === undefined) {
    throw new ServerConfigError(
      `CORS origin "${entry}" is not an origin: give scheme://host[:port] with no path, e.g. http://localhost:5173`,
    );
  }
  return normal;
}

/** Checks the API keys a server is given: present, distinct, no spaces (a Bearer header could not carry them). */
export function checkApiKeys(keys: readonly string[]): void {
  for (const k of keys) {
    if (k.length === 0) throw new ServerConfigError("an API key must not be empty");
    if (/\s/.test(k)) throw new ServerConfigError("an API key must not contain spaces or line breaks");
  }
  if (new Set(keys).size !== keys.length) throw new ServerConfigError("the same API key is given twice");
}

function digest(key: string): Buffer {
  return createHash("sha256").update(key).digest();
}

/**
 * Which key `given` is (-1: none), in time that depends on neither: every key is compared, each as
 * a fixed-length digest.
 */
function matchKey(given: string, keys: readonly Buffer[]): number {
  const g = digest(given);
  let found = -1;
  for (let i = 0; i < keys.length; i++) {
    const same = timingSafeEqual(g, keys[i]);
    if (same && found < 0) found = i;
  }
  return found;
}
