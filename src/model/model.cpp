#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "distmm/error.hpp"
#include "distmm/model.hpp"

namespace distmm {
namespace {

using json = nlohmann::json;

// Reads fields of a JSON object, failing with one line that names the file and the field.
class Reader {
 public:
  Reader(std::string file) : file_(std::move(file)) {}
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw InputError("--model " + escaped_path(file_) + ": " + escaped(field) + ": " + what, -1,
                     "--model");
  }
  const json& object(const json& j, const std::string& key, const std::string& field) const {
    if (!j.is_object() || !j.contains(key)) fail(field, "missing");
    const json& v = j.at(key);
    if (!v.is_object()) fail(field, "must be an object");
    return v;
  }
  const json& array(const json& j, const std::string& key, const std::string& field) const {
    if (!j.is_object() || !j.contains(key)) fail(field, "missing");
    const json& v = j.at(key);
    if (!v.is_array() || v.empty()) fail(field, "must be a non-empty array");
    return v;
  }
  // A number >= 0 (> 0 when `positive`), finite.
  double number(const json& j, const std::string& key, const std::string& field,
                bool positive) const {
    if (!j.is_object() || !j.contains(key)) fail(field, "missing");
    const json& v = j.at(key);
    if (!v.is_number()) {
      fail(field, v.is_string() ? "must be a number, not the string " + escaped(v.dump()) +
                                      " (units are in the name: seconds, bytes, bytes per "
                                      "second)"
                                : "must be a number");
    }
    const double x = v.get<double>();
    if (!std::isfinite(x)) fail(field, "must be finite");
    if (x < 0) fail(field, "must not be negative, got " + escaped(v.dump()));
    if (positive && x == 0) fail(field, "must be above 0");
    return x;
  }
  // A whole number > 0.
  std::uint64_t whole(const json& j, const std::string& key, const std::string& field) const {
    const double x = number(j, key, field, true);
    if (x != std::floor(x)) fail(field, "must be a whole number");
    return static_cast<std::uint64_t>(x);
  }
  // Element i of `list`, an object; `field` is the list's name.
  const json& element(const json& list, std::size_t i, const std::string& field) const {
    if (!list[i].is_object()) fail(field + "[" + std::to_string(i) + "]", "must be an object");
    return list[i];
  }
  std::string text(const json& j, const std::string& key, const std::string& field) const {
    if (!j.is_object() || !j.contains(key)) return {};
    if (!j.at(key).is_string()) fail(field, "must be a string");
    return j.at(key).get<std::string>();
  }
  // Rejects keys the schema does not have (a misspelt field would silently be ignored).
  void only(const json& j, std::initializer_list<const char*> keys,
            const std::string& where) const {
    for (const auto& item : j.items()) {
      const std::string& key = item.key();
      if (std::find_if(keys.begin(), keys.end(), [&](const char* k) { return key == k; }) ==
          keys.end()) {
        fail(where + escaped(key), "not a field of the model (see docs/model.schema.json)");
      }
    }
  }

 private:
  std::string file_;
};

LinkModel read_link(const Reader& r, const json& links, const std::string& key, bool required) {
  LinkModel link;
  if (!links.contains(key) && !required) return link;
  const std::string field = "links." + key;
  const json& object = r.object(links, key, field);
  r.only(object, {"pieces", "first_use_s_per_page", "overlap_contention", "exchange_slowdown"},
         field + ".");
  link.first_use_s_per_page =
      r.number(object, "first_use_s_per_page", field + ".first_use_s_per_page", false);
  // Optional figures of at most kMaxContention; `into` keeps its default when absent.
  const auto at_most_max = [&](const char* name, bool positive, double& into) {
    if (!object.contains(name)) return;
    into = r.number(object, name, field + "." + name, positive);
    if (into > kMaxContention) {
      r.fail(field + "." + name,
             "must be at most " + std::to_string(static_cast<int>(kMaxContention)));
    }
  };
  at_most_max("overlap_contention", false, link.overlap_contention);
  at_most_max("exchange_slowdown", true, link.exchange_slowdown);
  const json& pieces = r.array(object, "pieces", field + ".pieces");
  std::uint64_t previous = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const std::string f = field + ".pieces[" + std::to_string(i) + "].";
    const json& p = r.element(pieces, i, field + ".pieces");
    r.only(p, {"max_bytes", "latency_s", "bandwidth_Bps"}, f);
    LinkPiece piece;
    piece.max_bytes = r.whole(p, "max_bytes", f + "max_bytes");
    if (i > 0 && piece.max_bytes <= previous) {
      r.fail(f + "max_bytes", "must grow from piece to piece");
    }
    previous = piece.max_bytes;
    piece.latency_s = r.number(p, "latency_s", f + "latency_s", false);
    piece.bandwidth_Bps = r.number(p, "bandwidth_Bps", f + "bandwidth_Bps", true);
    link.pieces.push_back(piece);
  }
  return link;
}

json link_json(const LinkModel& l) {
  json a = json::array();
  for (const LinkPiece& p : l.pieces) {
    a.push_back({{"max_bytes", p.max_bytes},
                 {"latency_s", p.latency_s},
                 {"bandwidth_Bps", p.bandwidth_Bps}});
  }
  return {{"pieces", a},
          {"first_use_s_per_page", l.first_use_s_per_page},
          {"overlap_contention", l.overlap_contention},
          {"exchange_slowdown", l.exchange_slowdown}};
}

// [low, high]: two finite numbers, low < high (either may be negative: ln of a ratio).
LogInterval read_log_interval(const Reader& r, const json& v, const std::string& field) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number()) {
    r.fail(field, "must be [low, high], two numbers");
  }
  const LogInterval out{v[0].get<double>(), v[1].get<double>()};
  if (!std::isfinite(out.low) || !std::isfinite(out.high) || !(out.low < out.high)) {
    r.fail(field, "must be [low, high] with low below high, both finite");
  }
  return out;
}

}  // namespace

double LinkModel::time(std::uint64_t bytes) const {
  if (pieces.empty()) return 0;
  for (const LinkPiece& p : pieces) {
    if (bytes <= p.max_bytes) return p.latency_s + static_cast<double>(bytes) / p.bandwidth_Bps;
  }
  const LinkPiece& last = pieces.back();
  return last.latency_s + static_cast<double>(bytes) / last.bandwidth_Bps;
}

LinkModel fit_link(const std::vector<std::size_t>& sizes, const std::vector<double>& times) {
  // A smaller message's time above a larger one's (the scheduler's, under load: a CI run
  // under ASan fitted a negative bandwidth from an 8 B ping-pong slower than its largest)
  // takes the larger's.
  std::vector<double> t(times.begin(), times.end());
  for (std::size_t i = t.size(); i-- > 1;) t[i - 1] = std::min(t[i - 1], t[i]);
  LinkModel link;
  constexpr double kMinSlope = 1e-12;  // s per byte: 1 TB/s
  if (sizes.size() < 2) return link;
  // A step that looks free is no faster than a quarter of the whole sweep's rate.
  const double floor_slope =
      (t.back() - t.front()) / static_cast<double>(sizes.back() - sizes.front()) * 0.25;
  double end = t.front();  // the link's time at the previous point
  for (std::size_t i = 1; i < sizes.size(); ++i) {
    const double ds = static_cast<double>(sizes[i] - sizes[i - 1]);
    const double slope = std::max({(t[i] - t[i - 1]) / ds, floor_slope, kMinSlope});
    LinkPiece piece;
    piece.max_bytes = sizes[i];
    piece.bandwidth_Bps = 1.0 / slope;
    // Through the point; where the slope was raised, from the previous piece's end instead
    // (through the point it would start below it).
    const auto at = [&](std::size_t j) { return slope * static_cast<double>(sizes[j]); };
    piece.latency_s = std::max({0.0, t[i] - at(i), end - at(i - 1)});
    end = piece.latency_s + at(i);
    link.pieces.push_back(piece);
  }
  return link;
}

double GemmModel::rate(double flops) const {
  if (curve.empty()) return 1;
  return interpolate_in_log(
      curve, flops, [](const GemmPoint& p) { return p.flops; },
      [](const GemmPoint& p) { return p.gflops; });
}

namespace {

// The efficiency at `dim` along one measured curve (points of one `other`, by dim).
double narrow_efficiency(const GemmNarrow* first, const GemmNarrow* last, double dim,
                         double GemmNarrow::*field) {
  if (dim >= (last - 1)->dim) return 1.0;
  if (dim <= first->dim) return first->*field;
  for (const GemmNarrow* p = first + 1; p != last; ++p) {
    if (dim <= p->dim) {
      const double w =
          (std::log(dim) - std::log((p - 1)->dim)) / (std::log(p->dim) - std::log((p - 1)->dim));
      return (p - 1)->*field + w * (p->*field - (p - 1)->*field);
    }
  }
  return 1.0;
}

}  // namespace

double GemmModel::rate(double rows, double inner, double cols) const {
  const double base = rate(2.0 * rows * inner * cols);
  // Per measured `other` (ascending), the efficiency there; then interpolated in `other`.
  const auto efficiency = [&](double dim, double other, double GemmNarrow::*field) {
    if (narrow.empty()) return 1.0;
    std::vector<std::pair<double, double>> by_other;  // (other, efficiency)
    for (std::size_t i = 0; i < narrow.size();) {
      std::size_t j = i;
      while (j < narrow.size() && narrow[j].other == narrow[i].other) ++j;
      by_other.emplace_back(narrow[i].other,
                            narrow_efficiency(&narrow[i], &narrow[i] + (j - i), dim, field));
      i = j;
    }
    return interpolate_in_log(
        by_other, other, [](const auto& o) { return o.first; },
        [](const auto& o) { return o.second; });
  };
  // Narrow output (few rows, or few columns): the other two dimensions are the big operand's.
  const bool few_rows = rows <= cols;
  const double big = few_rows ? std::sqrt(inner * cols) : std::sqrt(inner * rows);
  // At most 1: a narrow multiply is not faster than the square curve at its flops; readings
  // above it are a shared machine's noise against a curve taken at another moment.
  return base * std::min({1.0, efficiency(std::min(rows, cols), big, &GemmNarrow::rows),
                          efficiency(inner, std::sqrt(rows * cols), &GemmNarrow::inner)});
}

double CollectiveCurve::time(std::uint64_t bytes,
                             const std::function<double(double)>& links) const {
  if (points.empty()) return 0;
  const double b = std::max(1.0, static_cast<double>(bytes));
  if (bytes <= points.front().bytes) return points.front().s;
  for (std::size_t i = 1; i < points.size(); ++i) {
    if (bytes <= points[i].bytes) {
      const CollectivePoint &lo = points[i - 1], &hi = points[i];
      const double x0 = std::log(std::max(1.0, static_cast<double>(lo.bytes)));
      const double x1 = std::log(static_cast<double>(hi.bytes));
      const double w = (std::log(b) - x0) / (x1 - x0);
      // Across hosts the library may switch algorithms between two calls: carry the calls'
      // times over the links' cost of each size, which follows the switch.
      if (links && !one_host()) {
        const double at_lo = links(std::max(1.0, static_cast<double>(lo.bytes)));
        const double at_hi = links(static_cast<double>(hi.bytes)), at_b = links(b);
        if (at_lo > 0 && at_hi > 0 && at_b > 0) {
          const double r0 = std::log(lo.s / at_lo), r1 = std::log(hi.s / at_hi);
          return at_b * std::exp(r0 + w * (r1 - r0));
        }
      }
      return std::exp(std::log(lo.s) + w * (std::log(hi.s) - std::log(lo.s)));
    }
  }
  const CollectivePoint& last = points.back();
  const auto last_bytes = static_cast<double>(last.bytes);
  if (!links) return last.s * b / last_bytes;
  const double at_last = links(last_bytes);
  // Only a call long and large enough that its bytes, not a fixed stall (milliseconds of
  // TCP), set its time says how the bytes go; or, across hosts, a large call and the one
  // before it, whose difference cancels a stall both paid. Within one host a large call says
  // it however short it was.
  constexpr std::uint64_t kBandwidthBytes = 1u << 20;
  constexpr std::uint64_t kPairBytes = 256u << 10;
  constexpr double kBandwidthSeconds = 0.05;
  constexpr std::uint64_t kOneHostBandwidthBytes = 8u << 20;
  const CollectivePoint* prev = points.size() > 1 ? &points[points.size() - 2] : nullptr;
  const bool pair =
      !one_host() && prev != nullptr && last.bytes >= kBandwidthBytes && prev->bytes >= kPairBytes;
  const bool says = one_host()
                        ? last.bytes >= kOneHostBandwidthBytes
                        : pair || (last.bytes >= kBandwidthBytes && last.s >= kBandwidthSeconds);
  // A call that does not say how the bytes go across hosts carries no more than its own
  // time: the links' cost beyond it, or that time if more.
  if (!says && !one_host()) return std::max(last.s, links(b));
  double ratio = at_last > 0 ? last.s / at_last : 1.0;
  // Across hosts a call's time over the links' may be a start-up cost (TCP ramping up after
  // idle), not a rate: only two calls say how the bytes go, by the difference of their times
  // over the links'; one large call alone carries the links' cost beyond it.
  if (!one_host()) {
    const double links_diff =
        prev != nullptr ? at_last - links(static_cast<double>(prev->bytes)) : 0.0;
    ratio = pair && links_diff > 0 ? std::min(ratio, (last.s - prev->s) / links_diff) : 1.0;
  }
  // Within a host a call faster than the links says so as much as one slower.
  const double slower = says ? std::clamp(ratio, one_host() ? 0.0 : 1.0, 4.0) : 1.0;
  const double beyond = last.s + slower * std::max(0.0, links(b) - at_last);
  // Within a host a collective's large calls are its copies and sums through memory: no
  // cheaper per byte than its largest measured call, whatever faster pieces the links'
  // ping-pong found for larger messages.
  return one_host() && says ? std::max(beyond, last.s * b / last_bytes) : beyond;
}

namespace {
// A point's figure at `bytes`: proportional below the first point, linear between points,
// proportional to the last beyond it.
template <typename Of>
double along(const std::vector<CollectivePoint>& points, std::uint64_t bytes, Of of) {
  if (points.empty()) return 0;
  const double b = static_cast<double>(bytes);
  if (bytes <= points.front().bytes) {
    return of(points.front()) * b / std::max(1.0, static_cast<double>(points.front().bytes));
  }
  for (std::size_t i = 1; i < points.size(); ++i) {
    if (bytes <= points[i].bytes) {
      const CollectivePoint &lo = points[i - 1], &hi = points[i];
      const double w =
          (b - static_cast<double>(lo.bytes)) / static_cast<double>(hi.bytes - lo.bytes);
      return of(lo) + w * (of(hi) - of(lo));
    }
  }
  return of(points.back()) * b / static_cast<double>(points.back().bytes);
}
}  // namespace

double CollectiveCurve::first_use(std::uint64_t bytes) const {
  return along(points, bytes, [](const CollectivePoint& p) { return p.first_use_s; });
}

const CollectiveCurve* MachineModel::collective(const std::string& op, int ranks,
                                                int ranks_per_host, int groups) const {
  for (const CollectiveCurve& c : collectives) {
    if (c.op == op && c.ranks == ranks && c.ranks_per_host == ranks_per_host &&
        c.groups == groups) {
      return &c;
    }
  }
  return nullptr;
}

double MachineModel::strided_rate(double bytes) const {
  if (strided_copy_curve.empty()) return strided_copy_Bps;
  return interpolate_in_log(
      strided_copy_curve, bytes, [](const StridedPoint& p) { return static_cast<double>(p.bytes); },
      [](const StridedPoint& p) { return p.Bps; });
}

const GemmModel& MachineModel::gemm_for(int threads) const {
  for (const GemmModel& g : gemm) {
    if (g.threads == threads) return g;
  }
  throw InputError(
      model_label(*this) + ": no gemm curve for " + std::to_string(threads) +
          " BLAS thread(s) per rank (the model has " +
          [&] {
            std::string t;
            for (const GemmModel& g : gemm) {
              t += (t.empty() ? "" : ", ") + std::to_string(g.threads);
            }
            return t;
          }() +
          ")",
      -1, "--model");
}

std::string model_label(const MachineModel& model) {
  if (model.file.empty() || model.file == model.name) return "--model " + model.name;
  return "--model " + model.file + " (" + model.name + ")";
}

namespace {

// gemm[i] (`f`: "gemm[i].").
GemmModel read_gemm(const Reader& r, const json& g, const std::string& f) {
  GemmModel model;
  if (g.contains("concurrent")) {
    model.concurrent = static_cast<int>(r.whole(g, "concurrent", f + "concurrent"));
  }
  model.threads = static_cast<int>(r.whole(g, "threads", f + "threads"));
  const json& curve = r.array(g, "curve", f + "curve");
  for (std::size_t c = 0; c < curve.size(); ++c) {
    const std::string cf = f + "curve[" + std::to_string(c) + "].";
    r.only(r.element(curve, c, f + "curve"), {"flops", "gflops"}, cf);
    GemmPoint point{r.number(curve[c], "flops", cf + "flops", true),
                    r.number(curve[c], "gflops", cf + "gflops", true)};
    if (!model.curve.empty() && point.flops <= model.curve.back().flops) {
      r.fail(cf + "flops", "must grow from point to point");
    }
    model.curve.push_back(point);
  }
  if (g.contains("narrow")) {
    const json& narrow = r.array(g, "narrow", f + "narrow");
    for (std::size_t c = 0; c < narrow.size(); ++c) {
      const std::string nf = f + "narrow[" + std::to_string(c) + "].";
      r.only(r.element(narrow, c, f + "narrow"), {"dim", "rows", "inner", "other"}, nf);
      GemmNarrow point{
          r.number(narrow[c], "dim", nf + "dim", true),
          r.number(narrow[c], "rows", nf + "rows", true),
          r.number(narrow[c], "inner", nf + "inner", true),
          narrow[c].contains("other") ? r.number(narrow[c], "other", nf + "other", true) : 0.0};
      if (!model.narrow.empty() && (point.other == 0) != (model.narrow.back().other == 0)) {
        r.fail(nf + "other", "give it for every point or for none");
      }
      if (!model.narrow.empty() && point.other < model.narrow.back().other) {
        r.fail(nf + "other", "must not fall from point to point");
      }
      if (!model.narrow.empty() && point.other == model.narrow.back().other &&
          point.dim <= model.narrow.back().dim) {
        r.fail(nf + "dim", "must grow from point to point (for the same other)");
      }
      model.narrow.push_back(point);
    }
  }
  return model;
}

// The memory figures: copy, reduction and strided-copy rates, the last optionally by the
// block's size (a retired strided_copy table is ignored).
void read_memory(const Reader& r, const json& j, MachineModel& m) {
  const json& memory = r.object(j, "memory", "memory");
  r.only(memory,
         {"copy_Bps", "reduce_Bps", "strided_copy_Bps", "strided_copy_curve", "strided_copy"},
         "memory.");
  m.strided_copy_Bps = r.number(memory, "strided_copy_Bps", "memory.strided_copy_Bps", true);
  if (memory.contains("strided_copy_curve")) {
    const std::string f = "memory.strided_copy_curve";
    const json& curve = r.array(memory, "strided_copy_curve", f);
    for (std::size_t i = 0; i < curve.size(); ++i) {
      const std::string pf = f + "[" + std::to_string(i) + "].";
      r.only(r.element(curve, i, f), {"bytes", "Bps"}, pf);
      StridedPoint p{r.whole(curve[i], "bytes", pf + "bytes"),
                     r.number(curve[i], "Bps", pf + "Bps", true)};
      if (!m.strided_copy_curve.empty() && p.bytes <= m.strided_copy_curve.back().bytes) {
        r.fail(pf + "bytes", "must grow from point to point");
      }
      m.strided_copy_curve.push_back(p);
    }
  }
  m.copy_Bps = r.number(memory, "copy_Bps", "memory.copy_Bps", true);
  m.reduce_Bps = r.number(memory, "reduce_Bps", "memory.reduce_Bps", true);
}

// Collectives the model no longer has curves for (read and ignored).
bool retired_op(const json& op) {
  for (const char* name : {"scatterv_columns", "gatherv_columns", "allgatherv_after_scatterv"}) {
    if (op == name) return true;
  }
  return false;
}

// collectives[i] (`f`: "collectives[i].").
CollectiveCurve read_collective(const Reader& r, const json& c, const std::string& f) {
  CollectiveCurve curve;
  curve.op = r.text(c, "op", f + "op");
  const auto known = [&](const auto& names) {
    return std::find(std::begin(names), std::end(names), curve.op) != std::end(names);
  };
  if (!known(kCollectiveOps) && !known(kThenComputeOps)) {
    r.fail(f + "op",
           c.contains("op") ? "unknown collective " + escaped(c.at("op").dump()) : "missing");
  }
  const auto whole = [&](const char* key) { return static_cast<int>(r.whole(c, key, f + key)); };
  curve.ranks = whole("ranks");
  curve.ranks_per_host = whole("ranks_per_host");
  curve.groups = whole("groups");
  const json& points = r.array(c, "points", f + "points");
  for (std::size_t k = 0; k < points.size(); ++k) {
    const std::string pf = f + "points[" + std::to_string(k) + "].";
    r.only(r.element(points, k, f + "points"), {"bytes", "s", "first_use_s", "first_use_pages"},
           pf);
    CollectivePoint point;
    point.bytes = r.whole(points[k], "bytes", pf + "bytes");
    if (!curve.points.empty() && point.bytes <= curve.points.back().bytes) {
      r.fail(pf + "bytes", "must grow from point to point");
    }
    point.s = r.number(points[k], "s", pf + "s", true);
    point.first_use_s = r.number(points[k], "first_use_s", pf + "first_use_s", false);
    curve.points.push_back(point);
  }
  return curve;
}

}  // namespace

MachineModel load_model(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::ifstream in(path);
  if (!in) {
    throw InputError("--model " + escaped_path(file) + ": cannot be read (" +
                         (std::filesystem::exists(path) ? "permission denied" : "no such file") +
                         ")",
                     -1, "--model");
  }
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {  // a parse error, or a number out of range
    throw InputError(
        "--model " + escaped_path(file) + ": not valid JSON (" + escaped(e.what(), 120) + ")", -1,
        "--model");
  }
  const Reader r(file);
  if (!j.is_object()) r.fail("(document)", "must be a JSON object");
  // first_touch_pool_bytes, first_touch_beyond_s_per_page, revisit_s_per_page and straggler are
  // retired: read and ignored (as are gemm[].first_call_s, gemm[].first_use_s_per_page and
  // memory.strided_copy).
  r.only(j,
         {"distmm_model", "name", "measured_by", "backend", "cores_per_host", "links", "gemm",
          "memory", "first_touch_s_per_page", "first_touch_pool_bytes",
          "first_touch_beyond_s_per_page", "revisit_s_per_page", "straggler", "collectives",
          "uncertainty"},
         "");
  if (r.number(j, "distmm_model", "distmm_model", true) != 1) {
    r.fail("distmm_model", "must be 1 (the version of the format)");
  }
  MachineModel m;
  m.name = r.text(j, "name", "name");
  if (m.name.empty()) m.name = file;
  m.file = file;
  m.measured_by = r.text(j, "measured_by", "measured_by");
  if (j.contains("backend")) {
    m.backend = r.text(j, "backend", "backend");
    if (m.backend != "mpi" && m.backend != "simulator") {
      r.fail("backend", "must be \"mpi\" or \"simulator\", got " + escaped(j.at("backend").dump()));
    }
  }
  m.cores_per_host = static_cast<int>(r.whole(j, "cores_per_host", "cores_per_host"));
  const json& links = r.object(j, "links", "links");
  r.only(links, {"intra", "inter"}, "links.");
  m.intra = read_link(r, links, "intra", true);
  m.inter = read_link(r, links, "inter", false);
  const json& gemm = r.array(j, "gemm", "gemm");
  for (std::size_t i = 0; i < gemm.size(); ++i) {
    const std::string f = "gemm[" + std::to_string(i) + "].";
    const json& g = r.element(gemm, i, "gemm");
    r.only(g, {"threads", "curve", "first_use_s_per_page", "narrow", "concurrent", "first_call_s"},
           f);
    m.gemm.push_back(read_gemm(r, g, f));
  }
  read_memory(r, j, m);
  m.first_touch_s_per_page = r.number(j, "first_touch_s_per_page", "first_touch_s_per_page", false);
  if (j.contains("uncertainty")) {
    const json& u = r.object(j, "uncertainty", "uncertainty");
    r.only(u,
           {"spread_cold", "spread_warm", "error_cold", "error_warm", "interval_cold",
            "interval_warm"},
           "uncertainty.");
    // Each optional: a model may give its own interval and leave the spread out.
    const auto read = [&](const char* key, double& into) {
      if (u.contains(key)) into = r.number(u, key, std::string("uncertainty.") + key, false);
    };
    read("spread_cold", m.uncertainty.spread_cold);
    read("spread_warm", m.uncertainty.spread_warm);
    for (const auto& [state, into] :
         {std::pair{"cold", &m.uncertainty.cold}, std::pair{"warm", &m.uncertainty.warm}}) {
      const std::string error = std::string("error_") + state,
                        interval = std::string("interval_") + state;
      if (u.contains(error)) {  // the symmetric form of models before the skewed intervals
        const double w = r.number(u, error, "uncertainty." + error, false);
        *into = {-w, w};
      }
      if (u.contains(interval))
        *into = read_log_interval(r, u.at(interval), "uncertainty." + interval);
    }
  }
  if (j.contains("collectives")) {
    const json& list = j.at("collectives");
    if (!list.is_array()) r.fail("collectives", "must be an array");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string f = "collectives[" + std::to_string(i) + "].";
      const json& c = r.element(list, i, "collectives");
      if (c.contains("op") && retired_op(c.at("op"))) continue;
      r.only(c, {"op", "ranks", "ranks_per_host", "groups", "points"}, f);
      m.collectives.push_back(read_collective(r, c, f));
    }
  }
  return m;
}

std::string model_json(const MachineModel& m) {
  json gemm = json::array();
  for (const GemmModel& g : m.gemm) {
    json curve = json::array();
    for (const GemmPoint& p : g.curve) curve.push_back({{"flops", p.flops}, {"gflops", p.gflops}});
    json entry{{"threads", g.threads}, {"curve", curve}, {"concurrent", g.concurrent}};
    if (!g.narrow.empty()) {
      json narrow = json::array();
      for (const GemmNarrow& p : g.narrow) {
        json point{{"dim", p.dim}, {"rows", p.rows}, {"inner", p.inner}};
        if (p.other > 0) point["other"] = p.other;
        narrow.push_back(point);
      }
      entry["narrow"] = narrow;
    }
    gemm.push_back(entry);
  }
  json links{{"intra", link_json(m.intra)}};
  if (!m.inter.pieces.empty()) links["inter"] = link_json(m.inter);
  json j{{"distmm_model", 1},
         {"name", m.name},
         {"measured_by", m.measured_by},
         {"backend", m.backend},
         {"cores_per_host", m.cores_per_host},
         {"links", links},
         {"gemm", gemm},
         {"memory",
          {{"copy_Bps", m.copy_Bps},
           {"reduce_Bps", m.reduce_Bps},
           {"strided_copy_Bps", m.strided_copy_Bps}}},
         {"first_touch_s_per_page", m.first_touch_s_per_page},
         {"uncertainty",
          {{"spread_cold", m.uncertainty.spread_cold},
           {"spread_warm", m.uncertainty.spread_warm},
           {"interval_cold", {m.uncertainty.cold.low, m.uncertainty.cold.high}},
           {"interval_warm", {m.uncertainty.warm.low, m.uncertainty.warm.high}}}}};
  if (!m.strided_copy_curve.empty()) {
    json curve = json::array();
    for (const StridedPoint& p : m.strided_copy_curve) {
      curve.push_back({{"bytes", p.bytes}, {"Bps", p.Bps}});
    }
    j["memory"]["strided_copy_curve"] = curve;
  }
  if (!m.collectives.empty()) {
    json list = json::array();
    for (const CollectiveCurve& c : m.collectives) {
      json points = json::array();
      for (const CollectivePoint& p : c.points) {
        points.push_back({{"bytes", p.bytes}, {"s", p.s}, {"first_use_s", p.first_use_s}});
      }
      list.push_back({{"op", c.op},
                      {"ranks", c.ranks},
                      {"ranks_per_host", c.ranks_per_host},
                      {"groups", c.groups},
                      {"points", points}});
    }
    j["collectives"] = list;
  }
  return j.dump(2) + "\n";
}

}  // namespace distmm
