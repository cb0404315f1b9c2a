export * from "./coreml-native.js";
