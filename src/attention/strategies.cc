// make_strategy: dispatch by method (see strategies.h).
#include "attention/strategies.h"

#include "attention/strategy_impl.h"

namespace kascade::attention {

std::unique_ptr<Strategy> make_strategy(const AttentionOptions& options, const Shape& shape) {
  validate_attention(options, shape);
  switch (options.method) {
    case Method::Dense: return make_dense(shape);
    case Method::Kascade: return make_kascade(options, shape);
    case Method::OracleTopK: return make_oracle_topk(options, shape);
    case Method::Streaming: return make_streaming(options, shape);
    case Method::Quest: return make_quest(options, shape);
    case Method::OmniKv: return make_omnikv(options, shape);
    case Method::LessIsMore: return make_lessismore(options, shape);
  }
  return make_dense(shape);
}

}  // namespace kascade::attention
