"""The halbench compiler: ONNX / MLIR -> halbench IR -> per-device executables -> bundle."""
