/**
 * `launch`: starts one process per host of an MLX hostfile, as `mlx.launch --backend ring` does (the
 * ring backend of MLX's distributed layer over TCP), each running this CLI with the given command:
 * `anemll-qwen35 launch --hosts hosts.json -- serve --model big=mlx:...` splits `big` across the
 * hosts, rank 0 serving the OpenAI API. Rank 0's output passes through as it is; the other ranks'
 * lines are prefixed with their rank.
 */
import { existsSync } from "node:fs";
import { AnemllError } from "@anemll-qwen35/core";
import {
  DEFAULT_STARTING_PORT,
  type Hostfile,
  hostsFromList,
  launchRing,
  MAX_RANKS_PER_HOST,
  readHostfile,
  ringAddresses,
} from "@anemll-qwen35/runtime-mlx";
import type { Command } from "commander";
import type { Context } from "../context.js";
import { int, UsageError } from "../options.js";

/** Test seam: the program every rank runs (default: this CLI under this Node, with its flags). */
export interface LaunchHooks {
  cli?: readonly string[];
}

export function registerLaunch(program: Command, ctx: Context, hooks: LaunchHooks = {}): void {
  program
    .command("launch")
    .description(
      "start this CLI on every host of an MLX hostfile (ring backend): `launch --hosts hosts.json -- serve --model big=mlx:PATH` serves a model split across the hosts",
    )
    .argument("<command...>", "the serve command every rank runs (after --)")
    .requiredOption(
      "--hosts <file|list>",
      'MLX hostfile (JSON: [{"ssh": "mac1", "ips": ["10.0.0.1"]}, ...], rank i = host i), or hosts separated by commas',
    )
    .option(
      "-n, --ranks-per-host <n>",
      `with a list of hosts: ranks started on each (at most ${MAX_RANKS_PER_HOST})`,
      int("-n", 1, MAX_RANKS_PER_HOST),
      1,
    )
    .option(
      "--starting-port <n>",
      "first TCP port of the ring; each rank takes the next ones",
      int("--starting-port", 1, 65535),
      DEFAULT_STARTING_PORT,
    )
    .option(
      "--connections-per-ip <n>",
      "TCP connections between neighbours per IP",
      int("--connections-per-ip", 1),
      1,
    )
    .option(
      "--env <NAME=value>",
      "environment variable for every rank (repeatable)",
      (v: string, all: string[] = []) => [...all, v],
    )
    .option("--ssh <command>", "how to reach a host that is not this machine", "ssh")
    .option(
      "--allow-wildcard",
      "let the hostfile's ips include 0.0.0.0 or :: (the ring then listens on every interface of that host)",
    )
    .allowExcessArguments(false)
    .action(async (command: string[], o) => {
      const out = ctx.output();
      const hostfile = hostsOf(o.hosts, o.ranksPerHost);
      const ring = {
        startingPort: o.startingPort,
        connectionsPerIp: o.connectionsPerIp,
        allowWildcard: o.allowWildcard === true,
      };
      ringAddresses(hostfile, ring); // refuses wildcards and ports past 65535 before anything starts
      const env: Record<string, string> = {};
      for (const e of o.env ?? []) {
        const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s.exec(e);
        if (!m) throw new UsageError(`--env must be NAME=value, got "${e}"`);
        env[m[1]] = m[2];
      }
      // Only serve knows how to split a model across the ranks; any other command would run whole on each.
      const sub = command.find((a) => !a.startsWith("-"));
      if (sub !== "serve") {
        throw new UsageError(
          `launch starts \`serve\` on every rank (the command that splits a model across them), not ${sub ? `\`${sub}\`` : "nothing"}: launch --hosts hosts.json -- serve --model big=mlx:PATH`,
        );
      }
      const cli = hooks.cli ?? [process.execPath, ...process.execArgv, process.argv[1]];
      const size = hostfile.hosts.length;
      out.notice(
        `launching ${size} rank(s): ${hostfile.hosts.map((h, r) => `${r}=${h.ssh}`).join(" ")} · ring from port ${o.startingPort}`,
      );
      const job = launchRing({
        hostfile,
        command: [...cli, ...command],
        ring,
        env,
        ssh: o.ssh.split(/\s+/).filter(Boolean),
        onOutput: (rank, stream, line) => {
          if (rank === 0) (stream === "stdout" ? ctx.streams.stdout : ctx.streams.stderr).write(`${line}\n`);
          else ctx.streams.stderr.write(`[rank ${rank}] ${line}\n`);
        },
        onExit: (rank, exit) => {
          const how = exit.signal ? `was killed (${exit.signal})` : `ended with code ${exit.code}`;
          if (rank !== 0 && (exit.code !== 0 || exit.signal)) {
            out.notice(
              `[launch] rank ${rank} (${hostfile.hosts[rank].ssh}) ${how}: the ring is broken; ` +
                "rank 0 keeps running (a split model answers 503) — restart the launch to use it again",
            );
          } else if (exit.code !== 0 || exit.signal) {
            out.notice(`[launch] rank ${rank} ${how}`);
          }
        },
      });
      // The ranks have process groups of their own: a Ctrl-C reaches only us. The first asks rank 0
      // to stop (it drains and tells the other ranks); a second stops every rank now.
      let signals = 0;
      const onSignal = () => {
        if (signals++ === 0) job.ranks[0].process.kill("SIGTERM");
        else job.stop();
      };
      process.on("SIGINT", onSignal);
      process.on("SIGTERM", onSignal);
      try {
        const exit = await job.done;
        if (exit.code !== 0 || exit.signal) {
          // rank 0 said why on its own stderr; the exit code says it failed
          throw new LaunchFailed(
            exit.signal ? `rank 0 was killed (${exit.signal})` : `rank 0 ended with code ${exit.code}`,
          );
        }
      } finally {
        process.removeListener("SIGINT", onSignal);
        process.removeListener("SIGTERM", onSignal);
      }
    });
}

/** Rank 0 failed (it printed why); the launch exits 1. */
class LaunchFailed extends AnemllError {
  constructor(message: string) {
    super("E_LAUNCH_RANK", message);
  }
}

/** --hosts: a hostfile when such a file exists, else a comma-separated list of hosts. */
function hostsOf(hosts: string, perHost: number): Hostfile {
  if (existsSync(hosts)) {
    if (perHost !== 1) throw new UsageError("-n goes with a list of hosts; a hostfile lists every rank");
    const file = readHostfile(hosts);
    if (file.backend !== "" && file.backend !== "ring") {
      throw new UsageError(`${hosts}: backend "${file.backend}": launch starts MLX's ring backend only`);
    }
    return file;
  }
  if (/\.json$/i.test(hosts)) throw new UsageError(`--hosts: no such hostfile: ${hosts}`);
  return hostsFromList(hosts, perHost);
}
