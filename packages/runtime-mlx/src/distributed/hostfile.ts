/**
 * The two host files of MLX's distributed ring backend (facts from ml-explore/mlx
 * python/mlx/_distributed_utils/{common,launch}.py and mlx/distributed/ring/ring.cpp):
 *
 * - the launcher's hostfile (what `mlx.launch --hostfile` reads, and `anemll-qwen35 launch --hosts`):
 *   a JSON list of hosts, or `{ "backend": "ring", "envs": ["K=V", ...], "hosts": [...] }`, each host
 *   `{ "ssh": "name-or-ip", "ips": ["10.0.0.2"], "rdma": [...] }`; rank i is the i-th host;
 * - the ring backend's MLX_HOSTFILE, which the launcher derives from it: per rank, the "ip:port"
 *   addresses that rank listens on (one per IP and connection; ports count up from a starting port).
 */
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { HostfileError } from "../errors.js";

export interface Host {
  /** Where to start the rank: 127.0.0.1 / localhost run locally, anything else through ssh. */
  readonly ssh: string;
  /** The addresses the ring uses between ranks (required by the ring backend). */
  readonly ips: readonly string[];
}

export interface Hostfile {
  readonly hosts: readonly Host[];
  /** "" when the file does not name one. */
  readonly backend: string;
  /** Environment variables (KEY=VALUE) to set for every rank. */
  readonly envs: readonly string[];
}

/** The most ranks one launch starts (each is a process holding part of a model; more is a mistake). */
export const MAX_RANKS = 64;
/** The most ranks `--hosts a,b -n N` starts on each host. */
export const MAX_RANKS_PER_HOST = 16;

/** 0.0.0.0, :: (in any spelling) and ::ffff:0.0.0.0: "every interface", not an address to reach a rank at. */
export function isWildcardAddress(ip: string): boolean {
  const a = ip.toLowerCase();
  return a === "0.0.0.0" || (isIP(a) === 6 && (/^[0:]+$/.test(a) || /^[0:]+:ffff:0\.0\.0\.0$/.test(a)));
}

/** Reads and checks a launcher hostfile; errors name the file and the entry at fault. */
export function readHostfile(file: string): Hostfile {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (cause) {
    throw new HostfileError(file, `cannot read it (${(cause as Error).message})`, { cause });
  }
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (cause) {
    throw new HostfileError(file, `not valid JSON (${(cause as Error).message})`, { cause });
  }
  return parseHostfile(data, file);
}

/** Checks a parsed launcher hostfile (see readHostfile); `file` names it in errors. */
export function parseHostfile(data: unknown, file = "hostfile"): Hostfile {
  const obj = Array.isArray(data) ? { hosts: data } : (data as Record<string, unknown>);
  if (typeof obj !== "object" || obj === null || !Array.isArray(obj.hosts)) {
    throw new HostfileError(
      file,
      'expected a list of hosts or an object with "hosts": [{ "ssh": "host", "ips": ["10.0.0.1"] }, ...]',
    );
  }
  if (obj.hosts.length === 0) throw new HostfileError(file, '"hosts" is empty: give one host per rank');
  if (obj.hosts.length > MAX_RANKS) {
    throw new HostfileError(
      file,
      `lists ${obj.hosts.length} hosts; a launch starts at most ${MAX_RANKS} ranks`,
    );
  }
  const backend = obj.backend ?? "";
  if (typeof backend !== "string") throw new HostfileError(file, '"backend" must be a string');
  const envs = obj.envs ?? [];
  if (
    !Array.isArray(envs) ||
    envs.some((e) => typeof e !== "string" || !/^[A-Za-z_][A-Za-z0-9_]*=/.test(e))
  ) {
    throw new HostfileError(file, '"envs" must be a list of "NAME=value" strings');
  }
  const hosts = obj.hosts.map((h: unknown, i: number): Host => {
    const host = h as Record<string, unknown>;
    if (typeof host !== "object" || host === null || typeof host.ssh !== "string" || host.ssh === "") {
      throw new HostfileError(file, `hosts[${i}] needs "ssh": the host name (or IP) to start rank ${i} on`);
    }
    const ips = host.ips ?? [];
    if (!Array.isArray(ips) || ips.some((ip) => typeof ip !== "string" || isIP(ip) === 0)) {
      throw new HostfileError(file, `hosts[${i}].ips must be a list of IP addresses`);
    }
    return { ssh: host.ssh, ips };
  });
  return { hosts, backend, envs };
}

/** `mlx.launch --hosts a,b -n 2`: hosts from a comma list, each repeated; an IP is also its ring address. */
export function hostsFromList(list: string, repeat = 1): Hostfile {
  const names = list.split(",").map((h) => h.trim());
  if (names.some((h) => h === "")) throw new HostfileError("--hosts", "a host name is empty");
  if (!Number.isInteger(repeat) || repeat < 1 || repeat > MAX_RANKS_PER_HOST) {
    throw new HostfileError("-n", `ranks per host must be 1 to ${MAX_RANKS_PER_HOST}, got ${repeat}`);
  }
  if (names.length * repeat > MAX_RANKS) {
    throw new HostfileError(
      "--hosts",
      `${names.length} hosts × ${repeat} ranks is ${names.length * repeat}; a launch starts at most ${MAX_RANKS} ranks`,
    );
  }
  const hosts: Host[] = [];
  for (const ssh of names) {
    for (let i = 0; i < repeat; i++) hosts.push({ ssh, ips: isIP(ssh) ? [ssh] : [] });
  }
  return { hosts, backend: "", envs: [] };
}

export interface RingOptions {
  /** First port; each rank and IP takes the next ones (mlx.launch's default is 32323). */
  readonly startingPort?: number;
  /** TCP connections per IP between neighbours (mlx.launch's --connections-per-ip, default 1). */
  readonly connectionsPerIp?: number;
  /** Let a rank's ips be a wildcard (0.0.0.0, ::): it then listens on every interface (default false). */
  readonly allowWildcard?: boolean;
}

export const DEFAULT_STARTING_PORT = 32323;

/** The ring backend's MLX_HOSTFILE content for these hosts: per rank, its "ip:port" addresses. */
export function ringAddresses(hostfile: Hostfile, o: RingOptions = {}): string[][] {
  let port = o.startingPort ?? DEFAULT_STARTING_PORT;
  const per = o.connectionsPerIp ?? 1;
  return hostfile.hosts.map((h, rank) => {
    if (h.ips.length === 0) {
      throw new HostfileError(
        "hostfile",
        `rank ${rank} (${h.ssh}) has no "ips": the ring backend connects ranks by IP address`,
      );
    }
    const out: string[] = [];
    for (const ip of h.ips) {
      if (isWildcardAddress(ip) && !o.allowWildcard) {
        throw new HostfileError(
          "hostfile",
          `rank ${rank} (${h.ssh}): ${ip} means every interface, so the ring would listen on all of them; ` +
            "give the address the other ranks reach this host at (or allow it explicitly: --allow-wildcard)",
        );
      }
      for (let c = 0; c < per; c++) {
        if (port > 65535) {
          throw new HostfileError(
            "hostfile",
            `rank ${rank} (${h.ssh}) would need port ${port}: choose a lower --starting-port`,
          );
        }
        out.push(`${ip}:${port++}`); // as mlx.launch writes them
      }
    }
    return out;
  });
}

/** Reads a ring MLX_HOSTFILE (per rank, its "ip:port" addresses). */
export function readRingHostfile(file: string): string[][] {
  let data: unknown;
  try {
    data = JSON.parse(readFileSync(file, "utf8"));
  } catch (cause) {
    throw new HostfileError(file, `not a readable JSON ring hostfile (${(cause as Error).message})`, {
      cause,
    });
  }
  if (!Array.isArray(data) || data.some((r) => !Array.isArray(r) || r.some((a) => typeof a !== "string"))) {
    throw new HostfileError(
      file,
      'expected the ring backend\'s layout: [["ip:port", ...], ...], one list per rank',
    );
  }
  return data as string[][];
}

/** "10.0.0.1:5000" → host and port. */
export function splitAddress(address: string): { host: string; port: number } {
  const m = /^(.+):(\d+)$/.exec(address);
  if (!m) throw new HostfileError("MLX_HOSTFILE", `"${address}" is not an ip:port address`);
  return { host: m[1], port: Number(m[2]) };
}
