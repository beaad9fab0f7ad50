// The GGUF writer (src/gguf/writer.h) against the reader: every value type
// and tensor written comes back equal, streamed tensors are written in whole
// rows, and a write that fails leaves no file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"

namespace kascade::gguf {
namespace {

TEST(GgufWriter, MetadataRoundTrips) {
  Writer writer;
  writer.add_uint32("a.u32", 7)
      .add_int32("a.i32", -3)
      .add_uint64("a.u64", uint64_t(1) << 40)
      .add_float32("a.f32", 0.5f)
      .add_bool("a.bool", true)
      .add_string("a.str", "h\xC3\xA9llo")
      .add_strings("a.strs", {"x", "", "yz"})
      .add_int32s("a.i32s", {1, -2, 3})
      .add_float32s("a.f32s", {1.5f, -2.25f})
      .add("a.u8", Value{ValueType::UINT8, uint64_t(255)});
  const File file = writer.parse();
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.get_uint("a.u32"), 7u);
  EXPECT_EQ(file.get_int("a.i32"), -3);
  EXPECT_EQ(file.get_uint("a.u64"), uint64_t(1) << 40);
  EXPECT_EQ(file.get_float("a.f32"), 0.5);
  EXPECT_TRUE(file.get_bool("a.bool"));
  EXPECT_EQ(file.get_string("a.str"), "h\xC3\xA9llo");
  EXPECT_EQ(file.get_string_array("a.strs"), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(file.get_int_array("a.i32s"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(file.get_float_array("a.f32s"), (std::vector<double>{1.5, -2.25}));
  EXPECT_EQ(file.get_uint("a.u8"), 255u);
  EXPECT_EQ(file.metadata().front().first, "a.u32");  // file order is the order added
  EXPECT_THROW(writer.add_uint32("a.u32", 1), Error);
}

TEST(GgufWriter, TensorsRoundTripAligned) {
  Writer writer(64);
  std::vector<float> values(3 * 8);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i) - 4.5f;
  writer.add_tensor("w", {8, 3}, TensorType::F32,
                    std::span(reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(float)));
  writer.add_tensor("q", {64, 2}, TensorType::Q8_0, [](uint64_t offset, std::span<uint8_t> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(offset + i);
  });
  const File file = writer.parse();
  EXPECT_EQ(file.alignment(), 64u);
  const TensorInfo& w = file.tensor("w");
  EXPECT_EQ(w.dims, (std::vector<int64_t>{8, 3}));
  EXPECT_EQ(std::memcmp(w.data, values.data(), values.size() * sizeof(float)), 0);
  const TensorInfo& q = file.tensor("q");
  EXPECT_EQ(q.type, TensorType::Q8_0);
  EXPECT_EQ(q.n_bytes, 2u * 68);  // two rows of two 34-byte blocks
  EXPECT_EQ(q.offset % 64, 0u);
  for (uint64_t i = 0; i < q.n_bytes; ++i) ASSERT_EQ(q.data[i], uint8_t(i));
  EXPECT_THROW(writer.add_tensor("bad", {8}, TensorType::F32, std::span<const uint8_t>()), Error);
  EXPECT_THROW(writer.add_tensor("odd", {33}, TensorType::Q8_0, [](uint64_t, std::span<uint8_t>) {}), Error);
  EXPECT_EQ(writer.parse().tensors().size(), 2u);  // the refused tensors left nothing behind
}

TEST(GgufWriter, WritesFilesInWholeRows) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "kascade_writer_test.gguf";
  Writer writer;
  writer.add_string("general.architecture", "llama");
  // 1 MiB rows: the writer's slices must hold whole rows.
  const int64_t row = int64_t(1) << 18;
  writer.add_tensor("big", {row, 80}, TensorType::F32, [&](uint64_t offset, std::span<uint8_t> out) {
    ASSERT_EQ(offset % uint64_t(row * 4), 0u);
    ASSERT_EQ(out.size() % uint64_t(row * 4), 0u);
    for (size_t i = 0; i < out.size(); i += 4) {
      const float v = float((offset + i) / 4 % 1000);
      std::memcpy(&out[i], &v, 4);
    }
  });
  uint64_t last = 0;
  writer.write(path.string(), [&](uint64_t done, uint64_t total) {
    EXPECT_GT(done, last);
    EXPECT_LE(done, total);
    last = done;
  });
  EXPECT_EQ(last, uint64_t(row) * 80 * 4);
  const File file = File::open(path.string());
  const TensorInfo& big = file.tensor("big");
  float v = 0;
  std::memcpy(&v, big.data + 4 * 12345678, 4);
  EXPECT_EQ(v, float(12345678 % 1000));
  std::filesystem::remove(path);

  EXPECT_THROW(writer.write("/nonexistent-dir/x.gguf"), Error);
  EXPECT_FALSE(std::filesystem::exists("/nonexistent-dir/x.gguf.tmp"));
}

}  // namespace
}  // namespace kascade::gguf
