/** The tool's name and version as written into reports (kept equal to package.json; a test checks). */
export const TOOL_NAME = "@anemll-qwen35/costplan";
export const TOOL_VERSION = "0.1.0";
