// Decode steps as CUDA graphs, one per key (batch, page-table stride, length
// bucket, attention plan): the first step of a key runs eagerly, which sizes
// the workspaces its kernels reserve; the second captures the step; later
// ones replay it. A graph holds the pointers it was captured with, so any
// buffer a step uses must stay put while its graph lives: when a step grows a
// workspace, every graph is dropped.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <map>
#include <string>

namespace kascade::gpu {

class GraphCache {
 public:
  GraphCache() = default;
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;
  ~GraphCache() { clear(); }

  // Runs the step of `key` on the stream: `kernels` enqueues its kernels;
  // `workspace_bytes` reports what its workspaces hold (a change after the
  // eager run drops every graph).
  void run(const std::string& key, cudaStream_t stream, const std::function<void()>& kernels,
           const std::function<size_t()>& workspace_bytes);
  // Drops every graph (their buffers are about to move).
  void clear();

 private:
  std::map<std::string, cudaGraphExec_t> graphs_;
  std::map<std::string, int> seen_;
};

}  // namespace kascade::gpu
