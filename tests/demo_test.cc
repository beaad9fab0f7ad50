// The main command's job (scripts/demo.sh): the demo model reads the built-in
// ~5,500-token document and answers its question. The document names the
// plough after "Vreni Zgraggen"; the question does not contain the name, so
// a model that repeats the question, or answers from anything but the
// document, fails. Runs the built `kascade` as demo.sh does, with dense
// attention and with the default Kascade attention (CTest label `demo`:
// minutes on two cores, so the sanitizer suite skips it).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "core/model_cache.h"

#include "run_kascade.h"

namespace kascade {
namespace {

namespace fs = std::filesystem;

// The 1.5B model's 5,482-token prefill takes 2-4 minutes on a busy 2-core machine.
constexpr auto kTimeLimit = std::chrono::minutes(30);

void expect_demo_answer(const std::string& attention) {
  const std::string model = cached_model_path(kDemoModelFile);
  ASSERT_TRUE(fs::exists(model)) << "demo model not found at " << model << " (scripts/fetch_model.sh "
                                 << kDemoModelFetchName << " fetches it)";
  const fs::path dir = fs::path(::testing::TempDir()) / ("demo_test_" + attention);
  fs::create_directories(dir);
  const test_cli::Outcome o = test_cli::run_kascade(
      {.args = {"generate", "--demo", "-m", model, "--attention", attention, "--budget", "10", "--max-tokens", "64",
                "--threads", "2"},
       .dir = dir,
       // As from a shell: the suite's passive OpenMP waits would slow the ~250 barriers of each decode token.
       .env = {"OMP_WAIT_POLICY", "OMP_NUM_THREADS"},
       .time_limit = kTimeLimit});
  SCOPED_TRACE(o.command);
  ASSERT_FALSE(o.timed_out) << "still running after " << kTimeLimit.count() << " minutes";
  ASSERT_TRUE(o.exited && o.status == 0) << "status " << o.status << "; stderr:\n" << o.err;
  // The summary line names the strategy that ran.
  EXPECT_NE(o.err.find("| attention " + attention + " "), std::string::npos) << o.err;
  EXPECT_NE(o.out.find("Zgraggen"), std::string::npos) << "the answer lacks the name; it was:\n" << o.out;
}

TEST(Demo, DenseAttentionAnswersTheQuestion) { expect_demo_answer("dense"); }

TEST(Demo, DefaultKascadeAttentionAnswersTheQuestion) { expect_demo_answer("kascade"); }

}  // namespace
}  // namespace kascade
