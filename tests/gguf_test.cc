// GGUF reader tests on files built byte by byte (gguf_builder.h: valid ones, and each
// hostile shape the reader must refuse with a one-line Error naming the file,
// the field and the offset), on a file written by gguf-py's GGUFWriter
// (tests/data/gguf, from tools/gen_dequant_fixtures.py), and on the default
// model when it is present on this machine.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/model_cache.h"
#include "gguf/gguf.h"
#include "quant/types.h"

#include "gguf_builder.h"

namespace kascade::gguf {
namespace {

using namespace test_gguf;

constexpr char kLabel[] = "test.gguf";

File parse(const std::vector<uint8_t>& image) { return File::parse(image.data(), image.size(), kLabel); }

// Expects parsing to fail with a one-line Error naming the file and an offset
// and containing `fragment`.
void expect_parse_error(const std::vector<uint8_t>& image, const std::string& fragment) {
  try {
    parse(image);
    ADD_FAILURE() << "parsed without error; expected: " << fragment;
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
    EXPECT_EQ(message.rfind(kLabel, 0), 0u) << message;
    EXPECT_NE(message.find("offset"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

std::string error_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

// A small valid file: three tensors of different types with known data.
//   norm  F32  [8]      at data offset 0   (32 bytes)
//   embd  Q8_0 [64, 3]  at data offset 32  (6 blocks, 204 bytes)
//   w     Q4_1 [32, 2]  at data offset 256 (2 blocks, 40 bytes)
GgufBuilder valid_builder() {
  GgufBuilder builder;
  builder.kv("general.architecture", kString, string_value("llama"));
  builder.kv("llama.block_count", kU32, scalar<uint32_t>(2));
  builder.tensor("norm", {8}, kTypeF32, 0);
  builder.tensor("embd", {64, 3}, kTypeQ8_0, 32);
  builder.tensor("w", {32, 2}, kTypeQ4_1, 256);
  for (int i = 0; i < 8; ++i) builder.data.put(float(i) * 0.5f);
  for (int i = 0; i < 296 - 32; ++i) builder.data.put(uint8_t(i * 7));
  return builder;
}

TEST(GgufMetadata, AllValueTypes) {
  GgufBuilder builder;
  Bytes strings;
  strings.str("a").str("").str("ünï");
  Bytes nested;  // [[1, 2], [3]] of INT32
  nested.raw(array_value(kI32, 2, Bytes().put<int32_t>(1).put<int32_t>(2)));
  nested.raw(array_value(kI32, 1, Bytes().put<int32_t>(3)));
  builder.kv("t.u8", kU8, scalar<uint8_t>(200))
      .kv("t.i8", kI8, scalar<int8_t>(-100))
      .kv("t.u16", kU16, scalar<uint16_t>(60000))
      .kv("t.i16", kI16, scalar<int16_t>(-30000))
      .kv("t.u32", kU32, scalar<uint32_t>(4000000000u))
      .kv("t.i32", kI32, scalar<int32_t>(-2000000000))
      .kv("t.f32", kF32, scalar<float>(0.1f))
      .kv("t.bool", kBool, scalar<uint8_t>(1))
      .kv("t.string", kString, string_value("line\nnext \xff"))
      .kv("t.array", kArray, array_value(kU32, 3, Bytes().put<uint32_t>(1).put<uint32_t>(2).put<uint32_t>(3)))
      .kv("t.u64", kU64, scalar<uint64_t>(uint64_t(1) << 63))
      .kv("t.i64", kI64, scalar<int64_t>(-(int64_t(1) << 62)))
      .kv("t.f64", kF64, scalar<double>(2.5e-300))
      .kv("t.strings", kArray, array_value(kString, 3, strings))
      .kv("t.nested", kArray, array_value(kArray, 2, nested))
      .kv("t.empty", kArray, array_value(kF32, 0, Bytes()))
      .kv("t.false", kBool, scalar<uint8_t>(0));
  const File file = parse(builder.build());

  ASSERT_EQ(file.metadata().size(), 17u);
  EXPECT_EQ(file.metadata()[0].first, "t.u8");  // file order kept
  EXPECT_EQ(file.metadata()[16].first, "t.false");
  EXPECT_EQ(file.find("t.i16")->type, ValueType::INT16);
  EXPECT_EQ(file.find("t.nested")->type, ValueType::ARRAY);
  EXPECT_EQ(file.find("missing"), nullptr);

  EXPECT_EQ(file.get_uint("t.u8"), 200u);
  EXPECT_EQ(file.get_int("t.i8"), -100);
  EXPECT_EQ(file.get_uint("t.u16"), 60000u);
  EXPECT_EQ(file.get_int("t.i16"), -30000);
  EXPECT_EQ(file.get_uint("t.u32"), 4000000000u);
  EXPECT_EQ(file.get_int("t.u32"), 4000000000);  // any integer type that fits
  EXPECT_EQ(file.get_int("t.i32"), -2000000000);
  EXPECT_EQ(file.get_float("t.f32"), double(0.1f));
  EXPECT_EQ(file.get_float("t.u16"), 60000.0);
  EXPECT_TRUE(file.get_bool("t.bool"));
  EXPECT_FALSE(file.get_bool("t.false"));
  EXPECT_EQ(file.get_string("t.string"), "line\nnext \xff");  // bytes kept as they are
  EXPECT_EQ(file.get_uint("t.u64"), uint64_t(1) << 63);
  EXPECT_EQ(file.get_int("t.i64"), -(int64_t(1) << 62));
  EXPECT_EQ(file.get_float("t.f64"), 2.5e-300);
  EXPECT_EQ(file.get_int_array("t.array"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(file.get_float_array("t.array"), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(file.get_string_array("t.strings"), (std::vector<std::string>{"a", "", "ünï"}));
  EXPECT_TRUE(file.get_float_array("t.empty").empty());
  const auto& nested_value = std::get<Array>(file.find("t.nested")->data);
  ASSERT_EQ(nested_value.items.size(), 2u);
  EXPECT_EQ(std::get<Array>(nested_value.items[1].data).items[0].type, ValueType::INT32);

  // Fallbacks apply only to missing keys; present keys are still type-checked.
  EXPECT_EQ(file.get_string("missing", "x"), "x");
  EXPECT_EQ(file.get_uint("missing", 7), 7u);
  EXPECT_EQ(file.get_float("missing", 1.5), 1.5);
  EXPECT_TRUE(file.get_bool("missing", true));
  EXPECT_EQ(file.get_uint("t.u8", 7), 200u);
  EXPECT_NE(error_message([&] { file.get_string("t.u8", "x"); }).find("is UINT8, expected STRING"),
            std::string::npos);
}

TEST(GgufMetadata, GetterErrorsNameTheKey) {
  GgufBuilder builder;
  builder.kv("k.neg", kI32, scalar<int32_t>(-3))
      .kv("k.big", kU64, scalar<uint64_t>(~uint64_t(0)))
      .kv("k.str", kString, string_value("s"))
      .kv("k.ints", kArray, array_value(kI8, 1, scalar<int8_t>(-1)))
      .kv("k.strs", kArray, array_value(kString, 1, Bytes().str("x")));
  const File file = parse(builder.build());
  const auto message = [&](const std::function<void()>& f) { return error_message(f); };
  EXPECT_EQ(message([&] { file.get_uint("k.none"); }), "test.gguf: metadata key 'k.none' is missing");
  EXPECT_EQ(message([&] { file.get_uint("k.neg"); }),
            "test.gguf: metadata key 'k.neg' is -3, expected a non-negative value");
  EXPECT_NE(message([&] { file.get_int("k.big"); }).find("too large"), std::string::npos);
  EXPECT_EQ(message([&] { file.get_bool("k.str"); }),
            "test.gguf: metadata key 'k.str' is STRING, expected BOOL");
  EXPECT_EQ(message([&] { file.get_float("k.str"); }),
            "test.gguf: metadata key 'k.str' is STRING, expected a number");
  EXPECT_EQ(message([&] { file.get_string("k.ints"); }),
            "test.gguf: metadata key 'k.ints' is an array of INT8, expected STRING");
  EXPECT_NE(message([&] { file.get_string_array("k.ints"); }).find("expected an array of STRING"),
            std::string::npos);
  EXPECT_NE(message([&] { file.get_int_array("k.strs"); }).find("k.strs[0]"), std::string::npos);
  EXPECT_NE(message([&] { file.get_int_array("k.str"); }).find("expected an array of integers"),
            std::string::npos);
}

TEST(GgufMetadata, ToString) {
  const auto value = [](ValueType type, auto data) { return Value{type, data}; };
  EXPECT_EQ(to_string(value(ValueType::UINT8, uint64_t{200})), "200");
  EXPECT_EQ(to_string(value(ValueType::INT64, int64_t{-5})), "-5");
  EXPECT_EQ(to_string(value(ValueType::FLOAT32, double(1e-5f))), "1e-05");
  EXPECT_EQ(to_string(value(ValueType::FLOAT64, 0.25)), "0.25");
  EXPECT_EQ(to_string(value(ValueType::BOOL, true)), "true");
  EXPECT_EQ(to_string(value(ValueType::STRING, std::string("a\"b\\c\nd\te\x01\xff\xc3\xa9✓"))),
            "\"a\\\"b\\\\c\\nd\\te\\x01\\xff\xc3\xa9✓\"");
  Array numbers{ValueType::INT32, {}};
  for (int64_t i = 1; i <= 5; ++i) numbers.items.push_back(value(ValueType::INT32, i));
  EXPECT_EQ(to_string(Value{ValueType::ARRAY, numbers}), "[1, 2, 3, 4, 5]");
  EXPECT_EQ(to_string(Value{ValueType::ARRAY, numbers}, 2), "[1, 2, ... 3 more]");
  EXPECT_EQ(to_string(Value{ValueType::ARRAY, numbers}, 0), "[... 5 more]");
  Array nested{ValueType::ARRAY, {Value{ValueType::ARRAY, numbers}}};
  EXPECT_EQ(to_string(Value{ValueType::ARRAY, nested}, 1), "[[1, ... 4 more]]");
  EXPECT_EQ(to_string(Value{ValueType::ARRAY, Array{ValueType::STRING, {}}}), "[]");
  // Overlong encodings and surrogates are not valid UTF-8.
  EXPECT_EQ(printable("\xc0\xaf\xed\xa0\x80"), "\\xc0\\xaf\\xed\\xa0\\x80");
  EXPECT_EQ(value_type_name(ValueType::FLOAT64), std::string("FLOAT64"));
}

TEST(GgufTensors, LookupShapesAndData) {
  const GgufBuilder builder = valid_builder();
  const std::vector<uint8_t> image = builder.build();
  const File file = parse(image);
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 32u);
  EXPECT_EQ(file.file_size(), image.size());
  EXPECT_EQ(file.path(), kLabel);
  ASSERT_EQ(file.tensors().size(), 3u);

  const TensorInfo& embd = file.tensor("embd");
  EXPECT_EQ(embd.type, TensorType::Q8_0);
  EXPECT_EQ(embd.dims, (std::vector<int64_t>{64, 3}));
  EXPECT_EQ(embd.n_elements, 192u);
  EXPECT_EQ(embd.n_bytes, 204u);
  EXPECT_EQ(embd.rows(), 3);
  EXPECT_EQ(embd.offset, 32u);
  const size_t data_start = image.size() - builder.data.data.size();
  EXPECT_EQ(embd.data, file.tensor("norm").data + 32);
  EXPECT_EQ(std::memcmp(embd.data, image.data() + data_start + 32, 204), 0);

  const TensorInfo* w = file.find_tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->type, TensorType::Q4_1);
  EXPECT_EQ(w->n_bytes, 40u);
  EXPECT_EQ(file.find_tensor("nope"), nullptr);
  EXPECT_EQ(error_message([&] { file.tensor("nope"); }), "test.gguf: tensor 'nope' not found");

  const TensorInfo& norm = file.tensor("norm");
  std::vector<float> values(8);
  dequantize_row(norm.type, norm.data, values.data(), 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(values[i], float(i) * 0.5f);
}

TEST(GgufTensors, ScalarTensorAndUnsupportedType) {
  GgufBuilder builder;
  builder.tensor("scalar", {}, kTypeF32, 0);
  builder.tensor("q2k", {256}, kTypeQ2_K, 32);
  builder.data.put(3.0f);
  for (int i = 0; i < 28 + 84; ++i) builder.data.put(uint8_t(0));
  const File file = parse(builder.build());
  EXPECT_EQ(file.tensor("scalar").n_elements, 1u);
  EXPECT_EQ(file.tensor("scalar").rows(), 1);
  const TensorInfo& q2k = file.tensor("q2k");
  EXPECT_EQ(q2k.n_bytes, 84u);
  std::vector<float> out(256);
  EXPECT_EQ(error_message([&] { dequantize_row(q2k.type, q2k.data, out.data(), 256); }),
            "unsupported tensor type Q2_K");
}

TEST(GgufVersions, TwoAndThreeReadAlike) {
  GgufBuilder builder = valid_builder();
  builder.version = 2;
  const File v2 = parse(builder.build());
  builder.version = 3;
  const File v3 = parse(builder.build());
  EXPECT_EQ(v2.version(), 2u);
  EXPECT_EQ(v3.version(), 3u);
  EXPECT_EQ(v2.get_string("general.architecture"), v3.get_string("general.architecture"));
  ASSERT_EQ(v2.tensors().size(), v3.tensors().size());
  EXPECT_EQ(std::memcmp(v2.tensor("w").data, v3.tensor("w").data, 40), 0);
}

TEST(GgufVersions, OthersRefused) {
  GgufBuilder builder = valid_builder();
  builder.version = 1;
  expect_parse_error(builder.build(), "unsupported GGUF version 1");
  builder.version = 4;
  expect_parse_error(builder.build(), "unsupported GGUF version 4");
  builder.version = 0x03000000;  // a big-endian v3 file read as little-endian
  expect_parse_error(builder.build(), "big-endian GGUF files are not supported");
  std::vector<uint8_t> image = valid_builder().build();
  image[0] = 'g';
  EXPECT_EQ(error_message([&] { parse(image); }),
            "test.gguf: not a GGUF file (no \"GGUF\" magic at offset 0)");
  EXPECT_NE(error_message([] { File::parse(nullptr, 0, kLabel); }).find("not a GGUF file"),
            std::string::npos);
}

TEST(GgufAlignment, CustomAlignmentPlacesTheDataSection) {
  GgufBuilder builder;
  builder.alignment = 64;
  builder.kv("general.alignment", kU32, scalar<uint32_t>(64));
  builder.tensor("a", {4}, kTypeF32, 0);
  builder.tensor("b", {4}, kTypeF32, 64);
  for (int i = 0; i < 16; ++i) builder.data.put(float(i));  // a = 0..3 at 0
  for (int i = 16; i < 20; ++i) builder.data.put(float(i));  // b = 16..19 at 64
  const File file = parse(builder.build());
  EXPECT_EQ(file.alignment(), 64u);
  float b[4];
  std::memcpy(b, file.tensor("b").data, sizeof b);
  EXPECT_EQ(b[0], 16.0f);
  EXPECT_EQ(b[3], 19.0f);
  EXPECT_EQ(file.tensor("b").data - file.tensor("a").data, 64);
}

TEST(GgufAlignment, MustBeAPowerOfTwo) {
  for (uint32_t bad : {0u, 3u, 48u}) {
    GgufBuilder builder;
    builder.kv("general.alignment", kU32, scalar<uint32_t>(bad));
    expect_parse_error(builder.build(), fmt::format("alignment {} is not a nonzero power of two", bad));
  }
  GgufBuilder negative;
  negative.kv("general.alignment", kI32, scalar<int32_t>(-64));
  expect_parse_error(negative.build(), "alignment -64 is not a nonzero power of two");
  GgufBuilder text;
  text.kv("general.alignment", kString, string_value("32"));
  expect_parse_error(text.build(), "metadata key 'general.alignment': STRING value, expected an integer");
}

TEST(GgufAlignment, UnalignedTensorOffset) {
  GgufBuilder builder = valid_builder();
  builder.tensor("late", {4}, kTypeF32, 300);
  for (int i = 0; i < 20; ++i) builder.data.put(0.0f);
  expect_parse_error(builder.build(), "tensor 'late': data offset 300 is not a multiple of the alignment 32");
}

// Each hostile shape the reader must refuse.
TEST(GgufHostile, HugeCounts) {
  GgufBuilder builder = valid_builder();
  builder.metadata_count = uint64_t(1) << 60;
  expect_parse_error(builder.build(), "metadata count 1152921504606846976 cannot fit");
  builder = valid_builder();
  builder.tensor_count = ~uint64_t(0);
  expect_parse_error(builder.build(), "tensor count 18446744073709551615 cannot fit");
  builder = valid_builder();
  builder.tensor_count = 4;  // one more than there are: the zero padding is read as a tensor info
  expect_parse_error(builder.build(), "tensor 3: empty name");
}

TEST(GgufHostile, HugeLengths) {
  GgufBuilder key;
  key.metadata.put(~uint64_t(0));  // key length
  key.n_metadata = 1;
  key.data.put(uint64_t(0)).put(uint64_t(0));  // enough bytes for the count to be plausible
  expect_parse_error(key.build(), "metadata entry 0: key length 18446744073709551615 exceeds");
  GgufBuilder string;
  string.kv("s", kString, Bytes().put<uint64_t>(uint64_t(1) << 40));
  expect_parse_error(string.build(), "metadata key 's': string length 1099511627776 exceeds");
  GgufBuilder array;
  array.kv("a", kArray, array_value(kU64, uint64_t(1) << 61, Bytes()));
  expect_parse_error(array.build(), "metadata key 'a': array of 2305843009213693952 UINT64 values cannot fit");
  GgufBuilder name;
  name.infos.put<uint64_t>(uint64_t(1) << 62);
  name.n_tensors = 1;
  name.data.put(uint64_t(0)).put(uint64_t(0)).put(uint64_t(0));
  expect_parse_error(name.build(), "tensor 0: name length 4611686018427387904 exceeds");
}

TEST(GgufHostile, BadValues) {
  GgufBuilder unknown;
  unknown.kv("x", 13, scalar<uint32_t>(0));
  expect_parse_error(unknown.build(), "metadata key 'x': unknown value type 13");
  GgufBuilder unknown_element;
  unknown_element.kv("x", kArray, array_value(99, 1, scalar<uint32_t>(0)));
  expect_parse_error(unknown_element.build(), "unknown value type 99");
  GgufBuilder duplicate;
  duplicate.kv("dup.key", kU8, scalar<uint8_t>(1)).kv("dup.key", kU8, scalar<uint8_t>(2));
  expect_parse_error(duplicate.build(), "metadata key 'dup.key': duplicate key");
  GgufBuilder empty_key;
  empty_key.kv("", kU8, scalar<uint8_t>(1));
  expect_parse_error(empty_key.build(), "metadata entry 0: empty key");
  GgufBuilder bad_bool;
  bad_bool.kv("b", kBool, scalar<uint8_t>(2));
  expect_parse_error(bad_bool.build(), "BOOL value 2 is neither 0 nor 1");
  GgufBuilder control_key;  // odd bytes in a key are escaped in the message
  control_key.kv("bad\nkey\xff", kU8, scalar<uint8_t>(1)).kv("bad\nkey\xff", kU8, scalar<uint8_t>(1));
  expect_parse_error(control_key.build(), "metadata key 'bad\\nkey\\xff': duplicate key");
}

TEST(GgufHostile, DeepNesting) {
  // `levels` arrays, each holding the next, around one byte.
  const auto nested = [](int levels) {
    Bytes value = array_value(kU8, 1, scalar<uint8_t>(1));
    for (int level = 1; level < levels; ++level) value = array_value(kArray, 1, value);
    GgufBuilder builder;
    builder.kv("deep", kArray, value);
    return builder.build();
  };
  EXPECT_EQ(parse(nested(8)).metadata().size(), 1u);
  expect_parse_error(nested(9), "metadata key 'deep': arrays nested deeper than 8");
}

TEST(GgufHostile, BadTensorInfos) {
  const auto with_tensor = [](std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    GgufBuilder builder;
    builder.tensor("t", dims, type, offset);
    for (int i = 0; i < 64; ++i) builder.data.put(uint8_t(0));
    return builder.build();
  };
  expect_parse_error(with_tensor({1, 1, 1, 1, 1}, kTypeF32, 0), "tensor 't': 5 dimensions, at most 4");
  expect_parse_error(with_tensor({4, 0}, kTypeF32, 0), "tensor 't': dimension 1 is 0, must be positive");
  expect_parse_error(with_tensor({uint64_t(-3)}, kTypeF32, 0), "dimension 0 is -3, must be positive");
  expect_parse_error(with_tensor({uint64_t(1) << 32, uint64_t(1) << 32}, kTypeF32, 0),
                     "element count overflows at dimension 1");
  expect_parse_error(with_tensor({4}, 31, 0), "tensor 't': unknown tensor type id 31");
  expect_parse_error(with_tensor({4}, 0xffffffffu, 0), "unknown tensor type id 4294967295");
  expect_parse_error(with_tensor({33, 2}, kTypeQ4_0, 0),
                     "tensor 't': row length 33 is not a multiple of the Q4_0 block size 32");
  constexpr uint32_t kTypeF64 = 28;  // 2^62 values of 8 bytes: the byte size overflows
  expect_parse_error(with_tensor({uint64_t(1) << 62}, kTypeF64, 0), "tensor 't': byte size overflows");
  expect_parse_error(with_tensor({uint64_t(1) << 61}, 0, 0), "run past the end of the file");
  expect_parse_error(with_tensor({17}, kTypeF32, 0), "68 bytes of data at data offset 0 run past the end");
  expect_parse_error(with_tensor({4}, kTypeF32, 64), "run past the end of the file");
  expect_parse_error(with_tensor({4}, kTypeF32, ~uint64_t(31)), "run past the end of the file");

  GgufBuilder empty_name;
  empty_name.tensor("", {4}, kTypeF32, 0);
  expect_parse_error(empty_name.build(), "tensor 0: empty name");
}

TEST(GgufHostile, DuplicateAndOverlappingTensors) {
  GgufBuilder duplicate = valid_builder();
  duplicate.tensor("w", {8}, kTypeF32, 320);
  for (int i = 0; i < 64; ++i) duplicate.data.put(uint8_t(0));
  expect_parse_error(duplicate.build(), "tensor 'w': duplicate tensor name");

  GgufBuilder overlap = valid_builder();
  overlap.tensor("over", {32}, kTypeQ4_1, 224);  // embd ends at 236
  expect_parse_error(overlap.build(), "tensor 'over': data overlaps the data of tensor 'embd'");

  GgufBuilder same_offset;
  same_offset.tensor("a", {8}, kTypeF32, 0).tensor("b", {8}, kTypeF32, 0);
  for (int i = 0; i < 32; ++i) same_offset.data.put(uint8_t(0));
  EXPECT_NE(error_message([&] { parse(same_offset.build()); }).find("overlaps the data of tensor"),
            std::string::npos);

  GgufBuilder adjacent;  // touching is fine
  adjacent.tensor("a", {8}, kTypeF32, 32).tensor("b", {8}, kTypeF32, 0);
  for (int i = 0; i < 64; ++i) adjacent.data.put(uint8_t(0));
  EXPECT_EQ(parse(adjacent.build()).tensors().size(), 2u);
}

TEST(GgufHostile, EveryTruncationFails) {
  const std::vector<uint8_t> image = valid_builder().build();
  for (size_t length = 0; length < image.size(); ++length) {
    const std::vector<uint8_t> prefix(image.begin(), image.begin() + length);
    try {
      parse(prefix);
      ADD_FAILURE() << "a " << length << "-byte prefix parsed";
    } catch (const Error& error) {
      EXPECT_EQ(std::string(error.what()).rfind(kLabel, 0), 0u);
    }
  }
}

TEST(GgufHostile, RandomMutationsNeverCrash) {
  // A cheap deterministic fuzz pass (the libFuzzer target explores further):
  // every mutant either parses, with every tensor inside the image, or throws Error.
  const std::vector<uint8_t> image = valid_builder().build();
  std::mt19937 rng(12345);
  int parsed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> mutant = image;
    const int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f) mutant[rng() % mutant.size()] = uint8_t(rng());
    try {
      const File file = parse(mutant);
      ++parsed;
      for (const TensorInfo& info : file.tensors()) {
        EXPECT_LE(info.n_bytes, file.file_size());
      }
    } catch (const Error&) {
    }
  }
  EXPECT_GT(parsed, 0);  // mutations of tensor data bytes leave a valid file
}

std::string write_temp_file(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = testing::TempDir() + "/" + name + "." + std::to_string(::getpid());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  return path;
}

TEST(GgufOpen, MapsAFileAndSurvivesMoves) {
  GgufBuilder builder = valid_builder();
  builder.alignment = 64;
  builder.kv("general.alignment", kU64, scalar<uint64_t>(64));
  builder.infos = Bytes();
  builder.n_tensors = 0;
  builder.tensor("norm", {8}, kTypeF32, 0).tensor("w", {32, 2}, kTypeQ4_1, 256);
  const std::string path = write_temp_file("gguf_open", builder.build());
  File file = File::open(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.alignment(), 64u);
  // mmap returns page-aligned memory, so the data itself is aligned.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(file.tensor("w").data) % 64, 0u);
  float first;
  std::memcpy(&first, file.tensor("norm").data, 4);
  EXPECT_EQ(first, 0.0f);
  File moved = std::move(file);
  std::memcpy(&first, moved.tensor("norm").data + 4, 4);
  EXPECT_EQ(first, 0.5f);
  const std::vector<uint8_t> image = builder.build();
  File assigned = File::parse(image.data(), image.size());
  assigned = std::move(moved);
  EXPECT_EQ(assigned.tensor("w").n_bytes, 40u);
  std::remove(path.c_str());
}

TEST(GgufOpen, MissingEmptyAndDirectory) {
  EXPECT_NE(error_message([] { File::open("/nonexistent/model.gguf"); })
                .find("/nonexistent/model.gguf: cannot open: No such file or directory"),
            std::string::npos);
  EXPECT_NE(error_message([] { File::open(testing::TempDir()); }).find("cannot open: Is a directory"),
            std::string::npos);
  const std::string empty = write_temp_file("gguf_empty", {});
  EXPECT_EQ(error_message([&] { File::open(empty); }), empty + ": empty file, not a GGUF file");
  std::remove(empty.c_str());
  const std::string text = write_temp_file("gguf_text", {'h', 'e', 'l', 'l', 'o'});
  EXPECT_NE(error_message([&] { File::open(text); }).find(text + ": not a GGUF file"), std::string::npos);
  std::remove(text.c_str());
}

// A file written by an independent writer (gguf-py's GGUFWriter).
TEST(GgufPyWriter, ReadsEverything) {
  const File file = File::open(std::string(KASCADE_SOURCE_DIR) + "/tests/data/gguf/gguf_py_writer.gguf");
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 64u);
  EXPECT_EQ(file.metadata().size(), 17u);
  EXPECT_EQ(file.get_string("general.architecture"), "testarch");
  EXPECT_EQ(file.find("test.u8")->type, ValueType::UINT8);
  EXPECT_EQ(file.get_uint("test.u8"), 200u);
  EXPECT_EQ(file.get_int("test.i8"), -100);
  EXPECT_EQ(file.get_uint("test.u16"), 60000u);
  EXPECT_EQ(file.get_int("test.i16"), -30000);
  EXPECT_EQ(file.get_uint("test.u32"), 4000000000u);
  EXPECT_EQ(file.get_int("test.i32"), -2000000000);
  EXPECT_EQ(file.find("test.f32")->type, ValueType::FLOAT32);
  EXPECT_EQ(file.get_float("test.f32"), double(0.1f));
  EXPECT_EQ(file.get_uint("test.u64"), (uint64_t(1) << 63) + 5);
  EXPECT_EQ(file.get_int("test.i64"), -(int64_t(1) << 62));
  EXPECT_EQ(file.get_float("test.f64"), 2.718281828459045);
  EXPECT_TRUE(file.get_bool("test.bool"));
  EXPECT_EQ(file.get_string("test.string"), "héllo wörld ✓");
  EXPECT_EQ(file.get_int_array("test.int_array"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(std::get<Array>(file.find("test.int_array")->data).element_type, ValueType::INT32);
  EXPECT_EQ(file.get_string_array("test.string_array"), (std::vector<std::string>{"a", "bc", "ü"}));
  EXPECT_EQ(file.get_float_array("test.float_array"), (std::vector<double>{0.5, -1.25}));

  ASSERT_EQ(file.tensors().size(), 4u);
  EXPECT_EQ(file.tensors()[0].name, "f32");
  const TensorInfo& f32 = file.tensor("f32");
  EXPECT_EQ(f32.dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(f32.offset, 0u);
  std::vector<float> values(6);
  dequantize_row(f32.type, f32.data, values.data(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(values[i], float(i));
  const TensorInfo& f16 = file.tensor("f16");
  EXPECT_EQ(f16.type, TensorType::F16);
  EXPECT_EQ(f16.offset, 64u);
  dequantize_row(f16.type, f16.data, values.data(), 4);
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[1], -2.5f);
  EXPECT_EQ(values[2], 65504.0f);
  const TensorInfo& q8 = file.tensor("q8_0");
  const TensorInfo& expected = file.tensor("q8_0.expected");
  EXPECT_EQ(q8.dims, (std::vector<int64_t>{64, 2}));
  EXPECT_EQ(q8.n_bytes, 136u);
  EXPECT_EQ(q8.offset, 128u);
  EXPECT_EQ(expected.offset, 320u);
  std::vector<float> row(64), reference(64);
  for (int64_t r = 0; r < q8.rows(); ++r) {
    dequantize_row(q8.type, q8.data + r * row_bytes(q8.type, 64), row.data(), 64);
    std::memcpy(reference.data(), expected.data + r * 64 * 4, 64 * 4);
    EXPECT_EQ(row, reference) << "row " << r;
  }
}

// The default model, when this machine has it: key metadata and rows checked
// against gguf-py (tools/gen_dequant_fixtures.py --model PATH prints them).
class RealModelTest : public testing::Test {
 public:
  void TestBody() override {
    const File file = File::open(default_model_path());
    EXPECT_EQ(file.version(), 3u);
    EXPECT_EQ(file.alignment(), 32u);
    EXPECT_EQ(file.metadata().size(), 33u);
    EXPECT_EQ(file.get_string("general.architecture"), "llama");
    EXPECT_EQ(file.get_uint("llama.block_count"), 30u);
    EXPECT_EQ(file.get_uint("llama.context_length"), 8192u);
    EXPECT_EQ(file.get_uint("llama.embedding_length"), 576u);
    EXPECT_EQ(file.get_uint("llama.feed_forward_length"), 1536u);
    EXPECT_EQ(file.get_uint("llama.attention.head_count"), 9u);
    EXPECT_EQ(file.get_uint("llama.attention.head_count_kv"), 3u);
    EXPECT_EQ(file.get_float("llama.rope.freq_base"), 100000.0);
    EXPECT_EQ(file.get_float("llama.attention.layer_norm_rms_epsilon"), double(1e-5f));
    EXPECT_EQ(file.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(file.get_string("tokenizer.ggml.pre"), "smollm");
    EXPECT_EQ(file.get_string_array("tokenizer.ggml.tokens").size(), 49152u);
    EXPECT_EQ(file.get_string_array("tokenizer.ggml.merges").size(), 48900u);
    EXPECT_EQ(file.get_int_array("tokenizer.ggml.token_type").size(), 49152u);
    EXPECT_EQ(file.get_uint("tokenizer.ggml.eos_token_id"), 2u);
    EXPECT_FALSE(file.get_bool("tokenizer.ggml.add_bos_token"));

    ASSERT_EQ(file.tensors().size(), 272u);
    int q4_1 = 0, f32 = 0, q8_0 = 0;
    for (const TensorInfo& info : file.tensors()) {
      q4_1 += info.type == TensorType::Q4_1;
      f32 += info.type == TensorType::F32;
      q8_0 += info.type == TensorType::Q8_0;
    }
    EXPECT_EQ(q4_1, 210);
    EXPECT_EQ(f32, 61);
    EXPECT_EQ(q8_0, 1);
    const TensorInfo& embd = file.tensor("token_embd.weight");
    EXPECT_EQ(embd.type, TensorType::Q8_0);
    EXPECT_EQ(embd.dims, (std::vector<int64_t>{576, 49152}));
    EXPECT_EQ(embd.n_bytes, 30081024u);

    const struct {
      const char* tensor;
      int64_t row;
      float values[6];
    } goldens[] = {
        {"token_embd.weight", 0,
         {-0.10654449462890625f, 0.032978057861328125f, 0.048198699951171875f,
          -0.022830963134765625f, -0.06849288940429688f, -0.04566192626953125f}},
        {"token_embd.weight", 49151,
         {0.011505126953125f, 0.0057525634765625f, 0.0977935791015625f, -0.0977935791015625f,
          0.0862884521484375f, -0.0460205078125f}},
        {"blk.0.attn_q.weight", 1,
         {-0.1173095703125f, -0.1173095703125f, -0.19281005859375f, 0.26019287109375f,
          -0.49481201171875f, 0.1846923828125f}},
        {"output_norm.weight", 0, {1.7578125f, 1.8203125f, 1.78125f, 1.6015625f, 1.7421875f, 1.71875f}},
    };
    for (const auto& golden : goldens) {
      const TensorInfo& info = file.tensor(golden.tensor);
      const int64_t n = info.dims[0];
      std::vector<float> row(static_cast<size_t>(n));
      dequantize_row(info.type, info.data + golden.row * row_bytes(info.type, n), row.data(), n);
      for (int i = 0; i < 6; ++i) {
        EXPECT_NEAR(row[i], golden.values[i], 1e-6 * std::fabs(golden.values[i]))
            << golden.tensor << " row " << golden.row << " value " << i;
      }
    }
  }
};

// Registered only when the model file exists, so a machine without it runs
// no test in its name rather than one that passes without checking anything.
const bool kRealModelRegistered = [] {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr, "gguf_test: %s not found; RealModel.SmolLM2 is not registered\n", path.c_str());
    return false;
  }
  testing::RegisterTest("RealModel", "SmolLM2", nullptr, nullptr, __FILE__, __LINE__,
                        []() -> testing::Test* { return new RealModelTest; });
  return true;
}();

}  // namespace
}  // namespace kascade::gguf
