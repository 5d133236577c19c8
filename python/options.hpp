#pragma once
// Keyword options of the Python calls as a strategy's settings.
#include <pybind11/pybind11.h>

#include <string>

#include "distmm/error.hpp"
#include "distmm/strategy.hpp"

namespace distmm::python {

namespace py = pybind11;

inline std::string text_of(const py::handle& value) {
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>() ? "1" : "0";
  return py::str(value).cast<std::string>();
}

// Keyword options as the strategy's settings: names as the program's flags (memory_per_rank
// is --memory-per-rank); one the strategy does not have is a ValueError naming it.
inline StrategySettings settings_of(const Strategy& s, const py::dict& options) {
  StrategySettings out;
  for (const auto& [key, value] : options) {
    std::string name = key.cast<std::string>();
    for (char& c : name) c = c == '_' ? '-' : c;
    bool known = false;
    for (const StrategyOption& o : s.options()) known = known || o.name == name;
    if (!known) {
      throw InputError(std::string(s.name()) + ": no option '" + key.cast<std::string>() + "'" +
                           (s.options().empty() ? " (it has none)" : ""),
                       -1, "--" + name);
    }
    out.set(name, text_of(value));
  }
  return out;
}

}  // namespace distmm::python
