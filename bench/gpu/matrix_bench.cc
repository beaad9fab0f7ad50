// Decode's weight products alone on the GPU (gpu::gemv): the matrices of
// Qwen2.5-1.5B and Llama 3.1 8B in each device format, at 1-16 input rows,
// each call reading a different copy of the matrix (together over twice the
// L2) as a decode step does, timed over a CUDA graph of calls. Prints a
// table of the median microseconds a call and the weight bytes a second.
//
//   matrix_bench [--formats q4_k,q6_k,q8_0,bf16] [--rows 1,2,4,8,16] [--shapes qwen2.5-1.5b,llama-3.1-8b]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "gpu/device.h"
#include "gpu/matrix.h"

namespace kascade::gpu {
namespace {

struct Shape {
  const char* model;
  const char* name;
  int64_t rows, cols;
};
constexpr Shape kShapes[] = {
    {"qwen2.5-1.5b", "qkv", 2048, 1536},     {"qwen2.5-1.5b", "o", 1536, 1536},
    {"qwen2.5-1.5b", "gate_up", 17920, 1536}, {"qwen2.5-1.5b", "down", 1536, 8960},
    {"llama-3.1-8b", "qkv", 6144, 4096},      {"llama-3.1-8b", "o", 4096, 4096},
    {"llama-3.1-8b", "gate_up", 28672, 4096}, {"llama-3.1-8b", "down", 4096, 14336},
};

const std::map<std::string, MatrixFormat> kFormats = {
    {"q4_k", MatrixFormat::Q4_K}, {"q6_k", MatrixFormat::Q6_K}, {"q8_0", MatrixFormat::Q8_0}, {"bf16", MatrixFormat::BF16}};

// Random bytes with every scale a small finite fp16 (bf16: every value), so
// that no product meets an infinity or NaN.
std::vector<uint8_t> random_matrix_bytes(MatrixFormat format, int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<uint8_t> bytes(device_bytes(format, rows, cols));
  std::mt19937_64 random(seed);
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    const uint64_t r = random();
    std::copy_n(reinterpret_cast<const uint8_t*>(&r), 8, bytes.data() + i);
  }
  const auto small_half = [&](size_t at) {  // fp16 in [2^-8, 2^-7): exponent 7
    bytes[at] = uint8_t(random());
    bytes[at + 1] = uint8_t(0x1c | (random() & 0x83));
  };
  switch (format) {
    case MatrixFormat::BF16:
      for (size_t i = 0; i + 1 < bytes.size(); i += 2) bytes[i + 1] = uint8_t(0x3c | (random() & 0x80));
      break;
    case MatrixFormat::Q4_K:  // per 144-byte block: fp16 d, fp16 dmin first
      for (size_t b = 0; b < bytes.size(); b += 144) small_half(b), small_half(b + 2);
      break;
    case MatrixFormat::Q6_K:  // the fp16 d array after the 208-byte bodies
      for (size_t at = size_t(rows * (cols / 256) * 208); at + 1 < bytes.size(); at += 2) small_half(at);
      break;
    case MatrixFormat::Q8_0:  // the fp16 scales after the int8 values
      for (size_t at = size_t(rows * cols); at + 1 < bytes.size(); at += 2) small_half(at);
      break;
  }
  return bytes;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median microseconds of one gemv call of `n` input rows over `copies`.
double time_calls(const std::vector<Matrix>& copies, const GemvInput& x, int n, float* out, cudaStream_t stream) {
  constexpr int kCalls = 64, kLaunches = 7;
  cudaGraph_t graph;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  for (int i = 0; i < kCalls; ++i) gemv(copies[size_t(i) % copies.size()], x, n, out, copies[0].rows, 0.0f, stream);
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::vector<double> per_call;
  for (int launch = 0; launch < kLaunches; ++launch) {
    check(cudaEventRecord(start, stream), "record");
    check(cudaGraphLaunch(exec, stream), "graph launch");
    check(cudaEventRecord(stop, stream), "record");
    check(cudaEventSynchronize(stop), "synchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    if (launch > 0) per_call.push_back(1000.0 * ms / kCalls);  // the first warms up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return median(per_call);
}

void run(const std::vector<std::string>& formats, const std::vector<int>& input_rows,
         const std::vector<std::string>& models) {
  const int max_rows = *std::max_element(input_rows.begin(), input_rows.end());
  const DeviceInfo device = device_info();
  fmt::print("{} ({} SMs)\n", device.name, device.multiprocessors);
  fmt::print("| model | matrix | format | input rows | us a call | weight GB/s |\n|---|---|---|---|---|---|\n");
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  constexpr size_t kRotationBytes = size_t(256) << 20;  // over twice the H100's and H200's L2
  for (const std::string& model : models) {
    for (const Shape& shape : kShapes) {
      if (model != shape.model) continue;
      // Inputs: bf16 rows and their quantized form.
      std::vector<uint16_t> host_x(size_t(max_rows * shape.cols));
      std::mt19937 random(7);
      for (uint16_t& v : host_x) v = uint16_t(0x3c00 | (random() & 0x80ff));  // bf16 in (-2, 2)
      DeviceMemory x = upload(host_x, "matrix_bench input");
      DeviceMemory quants(size_t(max_rows * shape.cols), "matrix_bench quants");
      DeviceMemory scales(size_t(max_rows * shape.cols / 32) * sizeof(float), "matrix_bench scales");
      quantize_rows(x.as<uint16_t>(), false, max_rows, shape.cols, {quants.as<int8_t>(), scales.as<float>()}, stream);
      DeviceMemory out(size_t(max_rows * shape.rows) * sizeof(float), "matrix_bench output");
      for (const std::string& format_name : formats) {
        const MatrixFormat format = kFormats.at(format_name);
        const uint64_t bytes = device_bytes(format, shape.rows, shape.cols);
        const size_t n_copies = std::max<size_t>(2, (kRotationBytes + bytes - 1) / bytes);
        std::vector<DeviceMemory> memory;
        std::vector<Matrix> copies;
        for (size_t c = 0; c < n_copies; ++c) {
          memory.push_back(upload(random_matrix_bytes(format, shape.rows, shape.cols, c), "matrix_bench weights"));
          copies.push_back({format, memory.back().as<uint8_t>(), shape.rows, shape.cols});
        }
        GemvInput input;
        if (format == MatrixFormat::BF16) input.x = x.as<uint16_t>();
        else input = {nullptr, false, quants.as<int8_t>(), scales.as<float>()};
        for (const int n : input_rows) {
          if (format == MatrixFormat::BF16 && n > kGemvGroup) continue;
          const double us = time_calls(copies, input, n, out.as<float>(), stream);
          fmt::print("| {} | {} {}x{} | {} | {} | {:.2f} | {:.0f} |\n", shape.model, shape.name, shape.rows,
                     shape.cols, format_name, n, us, double(bytes) / (us * 1e3));
        }
      }
    }
  }
  check(cudaStreamDestroy(stream), "stream");
}

}  // namespace
}  // namespace kascade::gpu

int main(int argc, char** argv) {
  using kascade::gpu::kFormats;
  CLI::App app{"Decode's weight products alone on the GPU (gpu::gemv), us a call and weight GB/s"};
  std::vector<std::string> formats = {"q4_k", "q6_k", "q8_0", "bf16"}, models = {"qwen2.5-1.5b", "llama-3.1-8b"};
  std::vector<int> input_rows = {1, 2, 4, 8, 16};
  app.add_option("--formats", formats, "Device formats")
      ->delimiter(',')
      ->check(CLI::IsMember(kFormats))
      ->capture_default_str();
  app.add_option("--rows", input_rows, "Input rows of a product")
      ->delimiter(',')
      ->check(CLI::Range(1, kascade::gpu::kMaxQuantizedGemvRows))
      ->capture_default_str();
  app.add_option("--shapes", models, "Models whose matrices are timed")
      ->delimiter(',')
      ->check(CLI::IsMember({"qwen2.5-1.5b", "llama-3.1-8b"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    kascade::gpu::run(formats, input_rows, models);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "matrix_bench: {}\n", e.what());
    return 1;
  }
}
