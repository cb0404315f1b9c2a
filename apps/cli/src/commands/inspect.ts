import { join } from "node:path";
import { readVerifiedChain } from "@anemll-qwen35/ir/chain";
import { printProgram, readMlPackage } from "@anemll-qwen35/ir/mil";
import type { Command } from "commander";
import { hashNotices } from "../chain-check.js";
import type { Context } from "../context.js";
import { UsageError } from "../options.js";

export function registerInspect(program: Command, ctx: Context): void {
  program
    .command("inspect")
    .description("summarise a converted model (model.json), or print the MIL text of a component or package")
    .argument("<path>", "folder written by `convert`, or a .mlpackage")
    .option(
      "--component <name>",
      "print this component's MIL program: embed, lm_head, or a super-block package as `inspect <path>` lists it",
    )
    .action(async (path: string, o) => {
      const out = ctx.output();
      if (path.replace(/\/$/, "").endsWith(".mlpackage")) {
        out.notice(
          `${path}: a package alone records no sha256, so it is read as it is, not checked for damage`,
        );
        const model = await readMlPackage(path);
        out.result({
          path,
          specificationVersion: model.specificationVersion,
          functions: Object.keys(model.program.functions),
        });
        out.line(printProgram(model.program));
        return;
      }
      // what `run` checks first: model.json, and each package against its sha256
      const m = await readVerifiedChain(path, hashNotices(out.notice));
      if (o.component) {
        const c = m.components.find((x) => x.name === o.component);
        if (!c)
          throw new UsageError(
            `no component "${o.component}" (components: ${m.components.map((x) => x.name).join(", ")})`,
          );
        const model = await readMlPackage(join(path, c.file));
        out.result({ component: c.name, io: c.io });
        out.line(printProgram(model.program));
        return;
      }
      out.result(m);
      out.line(
        `${path}: ${m.model.modelType}, ${m.model.numLayers} layers (${m.model.superBlocks} super-blocks), hidden ${m.model.hiddenSize}, vocab ${m.model.vocabSize}`,
      );
      out.line(`  source ${m.source.model}${m.source.revision ? `@${m.source.revision}` : ""}`);
      out.line(
        `  ctx ${m.ctx} · fuse ${m.fuse} · state ${m.state} · ${m.dtype} · attention ${m.attention ?? "sdpa"}${m.argmax ? " · argmax head" : ""}`,
      );
      const q = m.quantization;
      const encodings = q.encodings ?? { body: q.body, lm_head: q.lmHead, embed: q.embed };
      out.line(
        `  quant ${q.policy ?? "(not recorded)"}: ${Object.entries(encodings)
          .map(([k, v]) => `${k} ${v}`)
          .join(" · ")}`,
      );
      for (const c of m.components) {
        const ins = c.io.inputs.length;
        const outs = c.io.outputs.length;
        const layers = c.io.layers.length ? ` layers ${c.io.layers[0]}–${c.io.layers.at(-1)}` : "";
        out.line(
          `  ${c.file.padEnd(22)} ${c.kind.padEnd(12)}${layers} · ${ins} inputs, ${outs} outputs${c.io.states.length ? `, ${c.io.states.length} state` : ""}`,
        );
      }
      out.line(`  tokenizer ${m.tokenizer.files.join(", ")} · eos ${m.tokenizer.eosTokenIds.join(", ")}`);
    });
}
