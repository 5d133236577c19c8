#include "distmm/fault.hpp"

#include <charconv>
#include <string_view>
#include <vector>

namespace distmm {
namespace {

std::optional<long long> number(std::string_view s) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

}  // namespace

FaultPlan parse_fault(const std::string& spec) {
  std::vector<std::string_view> parts;
  std::string_view rest = spec;
  while (true) {
    const auto colon = rest.find(':');
    parts.push_back(rest.substr(0, colon));
    if (colon == std::string_view::npos) break;
    rest = rest.substr(colon + 1);
  }
  const auto bad = [&](const std::string& why) -> FaultPlan {
    throw InputError("--fault " + escaped(spec) + ": " + why +
                         " (use crash:RANK[:CALL], skip:RANK or delay:MS[:SEED])",
                     -1, "--fault");
  };
  FaultPlan plan;
  plan.spec = spec;
  if ((parts[0] == "crash" || parts[0] == "skip") &&
      (parts.size() == 2 || (parts[0] == "crash" && parts.size() == 3))) {
    const auto r = number(parts[1]);
    if (!r || *r > 1'000'000) return bad(quote(parts[1]) + " is not a rank");
    plan.kind = parts[0] == "crash" ? FaultPlan::Kind::crash : FaultPlan::Kind::skip;
    plan.rank = static_cast<int>(*r);
    if (parts.size() == 3) {
      const auto call = number(parts[2]);
      if (!call || *call < 1) {
        return bad(quote(parts[2]) + " is not a call number (1 is the first)");
      }
      plan.call = static_cast<std::uint64_t>(*call);
    }
    return plan;
  }
  if (parts[0] == "delay" && (parts.size() == 2 || parts.size() == 3)) {
    const auto ms = number(parts[1]);
    if (!ms || *ms > 60'000) return bad(quote(parts[1]) + " is not 0..60000 ms");
    plan.kind = FaultPlan::Kind::delay;
    plan.delay_ms = static_cast<int>(*ms);
    if (parts.size() == 3) {
      const auto seed = number(parts[2]);
      if (!seed) return bad(quote(parts[2]) + " is not a seed");
      plan.seed = static_cast<std::uint64_t>(*seed);
    }
    return plan;
  }
  return bad("unknown fault");
}

}  // namespace distmm
