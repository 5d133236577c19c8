#include "distmm/draw.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "distmm/dry_run.hpp"
#include "distmm/error.hpp"
#include "distmm/layout.hpp"

namespace distmm {
namespace {

constexpr double kSide = 220;   // the longest matrix side, in pixels
constexpr int kRankLines = 16;  // ranks whose collectives are listed (the rest summed up)

std::string colour(int rank, int ranks) {
  char text[32];
  std::snprintf(text, sizeof text, "hsl(%d,65%%,%d%%)", 360 * rank / std::max(1, ranks),
                rank % 2 ? 62 : 72);
  return text;
}

std::string bytes_text(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.3g %s", b, units[u]);
  return text;
}

std::string escaped_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

struct Panel {
  const char* name;
  std::size_t rows, cols;
  double x, y, w, h;
};

// One matrix: its outline, then each rank's block in the rank's colour, numbered where it
// is large enough to hold the number.
void draw_matrix(std::ostream& out, const Panel& p, const std::vector<BlockLayout>& layout,
                 Block BlockLayout::*which) {
  const int ranks = static_cast<int>(layout.size());
  const double sy = p.rows ? p.h / static_cast<double>(p.rows) : 0;
  const double sx = p.cols ? p.w / static_cast<double>(p.cols) : 0;
  out << "<text x='" << p.x << "' y='" << p.y - 8 << "' font-weight='bold'>" << p.name << " ("
      << p.rows << " x " << p.cols << ")</text>\n";
  out << "<rect x='" << p.x << "' y='" << p.y << "' width='" << p.w << "' height='" << p.h
      << "' fill='#eee' stroke='#333'/>\n";
  for (int r = 0; r < ranks; ++r) {
    const Block& b = layout[static_cast<std::size_t>(r)].*which;
    if (b.rows == 0 || b.cols == 0) continue;
    const double x = p.x + sx * static_cast<double>(b.col0),
                 y = p.y + sy * static_cast<double>(b.row0);
    const double w = sx * static_cast<double>(b.cols), h = sy * static_cast<double>(b.rows);
    out << "<rect x='" << x << "' y='" << y << "' width='" << w << "' height='" << h << "' fill='"
        << colour(r, ranks) << "' stroke='#333' stroke-width='0.5'><title>rank " << r << ": rows "
        << b.row0 << "-" << b.row0 + b.rows - 1 << ", columns " << b.col0 << "-"
        << b.col0 + b.cols - 1 << "</title></rect>\n";
    if (w >= 14 && h >= 12) {
      out << "<text x='" << x + w / 2 << "' y='" << y + h / 2 + 4
          << "' text-anchor='middle' font-size='" << std::min(12.0, std::min(w, h) * 0.6) << "'>"
          << r << "</text>\n";
    }
  }
}

// Each listed rank's collectives of one execution, in order: what it sends and receives.
int list_collectives(std::ostream& out, const DryRun& run, double y) {
  const int ranks = static_cast<int>(run.ranks.size());
  out << "<text x='20' y='" << y << "' font-weight='bold'>What moves in one execution "
      << "(per rank, in order: collective on its group, bytes sent / received)</text>\n";
  y += 20;
  for (int r = 0; r < std::min(ranks, kRankLines); ++r) {
    std::ostringstream line;
    bool in_execution = false;
    int listed = 0;
    for (const PlannedEvent& e : run.ranks[static_cast<std::size_t>(r)].events.expand()) {
      in_execution = in_execution || e.execution_start;
      if (!in_execution || e.op == OpKind::compute) continue;
      if (listed++ == 8) {
        line << " …";
        break;
      }
      line << (listed > 1 ? "; " : "") << name_of(e.op) << " on "
           << run.group_names[static_cast<std::size_t>(e.group)] << " "
           << bytes_text(static_cast<double>(e.bytes_sent)) << " / "
           << bytes_text(static_cast<double>(e.bytes_received));
    }
    if (listed == 0) line << "nothing (its blocks are all it needs)";
    out << "<rect x='20' y='" << y - 10 << "' width='10' height='10' fill='" << colour(r, ranks)
        << "'/><text x='36' y='" << y << "'>rank " << r << ": " << escaped_xml(line.str())
        << "</text>\n";
    y += 16;
  }
  if (ranks > kRankLines) {
    out << "<text x='20' y='" << y << "'>… and " << ranks - kRankLines << " more ranks</text>\n";
    y += 16;
  }
  return static_cast<int>(y);
}

}  // namespace

std::string sharding_svg(const Strategy& s, const MatmulShape& shape, int ranks,
                         const StrategySettings& settings) {
  std::vector<BlockLayout> layout;
  for (int r = 0; r < ranks; ++r) {
    const auto l = s.distributed_blocks(shape, ranks, r, settings);
    if (!l) {
      throw InputError("--draw: " + std::string(s.name()) + " has no distributed layout to draw",
                       -1, "--draw");
    }
    layout.push_back(*l);
  }
  const DryRun run = dry_run(s, shape, ranks, DataType::f64, settings, 1, true);
  const double longest = static_cast<double>(std::max({shape.m, shape.k, shape.n, std::size_t{1}}));
  const auto px = [&](std::size_t d) {
    return std::max(24.0, kSide * static_cast<double>(d) / longest);
  };
  const double top = 70;
  Panel a{"A", shape.m, shape.k, 20, top, px(shape.k), px(shape.m)};
  Panel b{"B", shape.k, shape.n, a.x + a.w + 50, top, px(shape.n), px(shape.k)};
  Panel c{"C = A @ B", shape.m, shape.n, b.x + b.w + 50, top, px(shape.n), px(shape.m)};
  const double matrices_bottom = top + std::max({a.h, b.h, c.h}) + 40;
  std::ostringstream body;
  body << "<text x='20' y='24' font-size='16' font-weight='bold'>" << escaped_xml(s.label(settings))
       << " on " << ranks << " ranks, --layout distributed</text>\n"
       << "<text x='20' y='44'>" << escaped_xml(std::string(s.description()))
       << "; each block coloured by the rank that holds it</text>\n";
  draw_matrix(body, a, layout, &BlockLayout::a);
  draw_matrix(body, b, layout, &BlockLayout::b);
  draw_matrix(body, c, layout, &BlockLayout::c);
  const int height = list_collectives(body, run, matrices_bottom) + 10;
  const double width = std::max(c.x + c.w + 20, 900.0);
  std::ostringstream out;
  out << "<?xml version='1.0' encoding='UTF-8'?>\n<svg xmlns='http://www.w3.org/2000/svg' width='"
      << width << "' height='" << height << "' font-family='sans-serif' font-size='11'>\n"
      << "<rect width='100%' height='100%' fill='white'/>\n"
      << body.str() << "</svg>\n";
  return out.str();
}

}  // namespace distmm
