// The dense strategy: exact causal attention, the engine's baseline.
#include "attention/exact.h"

namespace kascade::attention {

namespace {

class DenseStrategy final : public Strategy {
 public:
  explicit DenseStrategy(const Shape& shape) : exact_((check_shape(shape), shape)) {}
  std::string_view name() const override { return method_name(Method::Dense); }
  bool dense_prefill() const override { return true; }
  void forward(const Step& step) override { exact_.dense(step); }

 private:
  ExactAttention exact_;
};

}  // namespace

std::unique_ptr<Strategy> make_dense(const Shape& shape) {
  return std::make_unique<DenseStrategy>(shape);
}

}  // namespace kascade::attention
