/** `@anemll-qwen35/ir/core`: errors, dtypes and tensors (the dependency-free @anemll-qwen35/core). */
export * from "@anemll-qwen35/core";
