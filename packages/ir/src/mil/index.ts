export * from "./program.js";
