#include "cgroup.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "distmm/memory.hpp"

namespace distmm {

namespace {

// The fields of a /proc/self/mountinfo line, and those after its " - " separator.
struct Mount {
  std::string root, point, type, options;
};

std::vector<Mount> cgroup_mounts() {
  std::vector<Mount> mounts;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::vector<std::string> w;
    for (std::string s; f >> s;) w.push_back(s);
    const auto dash = std::find(w.begin(), w.end(), "-");
    if (w.size() < 5 || w.end() - dash < 4) continue;
    if (dash[1] == "cgroup" || dash[1] == "cgroup2")
      mounts.push_back({w[3], w[4], dash[1], dash[3]});
  }
  return mounts;
}

bool lists(const std::string& commas, const std::string& item) {
  return ("," + commas + ",").find("," + item + ",") != std::string::npos;
}

}  // namespace

std::vector<CgroupDir> own_cgroup_dirs(const std::string& controller) {
  std::string v1, v2;  // the group's path in each hierarchy (the kernel writes at least "/")
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      v2 = path;
    } else if (lists(controllers, controller)) {
      v1 = path;
    }
  }
  std::vector<CgroupDir> dirs;
  for (const Mount& m : cgroup_mounts()) {
    const bool is_v1 = m.type == "cgroup";
    const std::string& path = is_v1 ? v1 : v2;
    if (path.empty() || (is_v1 && !lists(m.options, controller))) continue;
    // The group's directory under the mount (whose root may be a subgroup), then its parents.
    std::string dir = path;
    if (m.root != "/" && dir.compare(0, m.root.size(), m.root) == 0) dir.erase(0, m.root.size());
    for (dir = m.point + (dir == "/" ? "" : dir);; dir.erase(dir.rfind('/'))) {
      dirs.push_back({dir, is_v1});
      if (dir.size() <= m.point.size()) break;
    }
  }
  return dirs;
}

std::uint64_t available_memory() {
  std::uint64_t available = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    std::uint64_t kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  // Each group's limit less what the group holds already, its page cache that the kernel
  // would reclaim left out (as `docker stats` counts a container's use).
  for (const CgroupDir& d : own_cgroup_dirs("memory")) {
    const auto number = [&](const std::string& file) -> std::optional<std::uint64_t> {
      std::ifstream in(d.path + "/" + file);
      std::string text;
      if (!(in >> text) || text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])))
        return std::nullopt;  // absent, or "max": no limit
      return std::strtoull(text.c_str(), nullptr, 10);
    };
    const auto limit = number(d.v1 ? "memory.limit_in_bytes" : "memory.max");
    const auto used = number(d.v1 ? "memory.usage_in_bytes" : "memory.current");
    if (!limit || !used) continue;
    std::uint64_t held = *used, reclaimable = 0;
    std::ifstream stat(d.path + "/memory.stat");
    const std::string key = d.v1 ? "total_inactive_file" : "inactive_file";
    for (std::string name; stat >> name;) {
      std::uint64_t value = 0;
      stat >> value;
      if (name == key) reclaimable = value;
    }
    held -= std::min(held, reclaimable);
    available = std::min(available, *limit > held ? *limit - held : 0);
  }
  return available;
}

}  // namespace distmm
