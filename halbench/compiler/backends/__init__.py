"""Tool wrappers that turn generated source into device code (glslang, NVRTC, hipRTC)."""
