#include "gpu/graph_cache.h"

#include "gpu/device.h"

namespace kascade::gpu {

void GraphCache::run(const std::string& key, cudaStream_t stream, const std::function<void()>& kernels,
                     const std::function<size_t()>& workspace_bytes) {
  if (const auto graph = graphs_.find(key); graph != graphs_.end()) {
    check(cudaGraphLaunch(graph->second, stream), "cudaGraphLaunch");
    return;
  }
  if (seen_[key]++ == 0) {
    const size_t before = workspace_bytes();
    kernels();  // eagerly: sizes the workspaces for this key
    if (workspace_bytes() != before) {
      const int seen = seen_[key];
      clear();  // the graphs hold the old workspace
      seen_[key] = seen;
    }
    return;
  }
  cudaGraph_t captured = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  kernels();
  check(cudaStreamEndCapture(stream, &captured), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, captured, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(captured);
  graphs_.emplace(key, exec);
  check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
}

void GraphCache::clear() {
  for (auto& [key, graph] : graphs_) cudaGraphExecDestroy(graph);
  graphs_.clear();
  seen_.clear();
}

}  // namespace kascade::gpu
