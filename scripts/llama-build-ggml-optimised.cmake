# Read by llama.cpp's CMake at the end of ggml's project() call (scripts/llama-build.sh passes it as
# CMAKE_PROJECT_ggml_INCLUDE), in ggml's directory scope: ggml and its backends keep the Release optimisation, while the
# rest of the build, compiled at -O0 from the command line, is unoptimised. The tests observe ggml (its kernels, its
# dispatch, the Vulkan backend's pipelines); libllama, common, mtmd, the server and the tools only load tiny models,
# parse arguments and answer HTTP, and at -O0 they compile in a third of the time (a fresh CI machine's longest step).
set(CMAKE_C_FLAGS_RELEASE "-O3 -DNDEBUG")
set(CMAKE_CXX_FLAGS_RELEASE "-O3 -DNDEBUG")
