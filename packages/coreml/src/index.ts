export * from "./addon.js";
export * from "./compute-units.js";
