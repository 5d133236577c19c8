#pragma once
// What every harness shares: its input written to a file of its own (distmm's readers take
// paths), and the contract it checks: a reader returns a value or throws the library's
// InputError; anything else (another exception, a crash, a sanitizer report, a hang) is a
// finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include "distmm/error.hpp"

namespace distmm::fuzz {

// A directory of this process's own (harnesses may run side by side).
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("distmm_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_bytes(const std::filesystem::path& p, const std::uint8_t* data,
                        std::size_t size) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// Runs f(); an InputError is the reader refusing bad input, every other exception aborts.
template <class F>
void expect_value_or_input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    // One printable line (error.hpp): no control byte may reach the terminal.
    for (const char c : std::string(e.what())) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        std::fprintf(stderr, "an error message holds byte %d: %s\n", c, e.what());
        std::abort();
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not an InputError: %s\n", e.what());
    std::abort();
  }
}

}  // namespace distmm::fuzz
