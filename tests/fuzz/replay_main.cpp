// The harnesses without libFuzzer: every file named on the command line, or held in a
// directory named there, is given to LLVMFuzzerTestOneInput once. The ordinary and sanitizer
// builds run the seed corpus and every input a finding left behind this way, as a regression
// test (fuzz_corpus_test.*), with no clang needed.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

int replay(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    return 1;
  }
  const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
  std::printf("%s (%zu bytes)\n", file.c_str(), bytes.size());
  std::fflush(stdout);  // a crash below is then named by the last line printed
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int inputs = 0, failed = 0;
  for (int a = 1; a < argc; ++a) {
    const std::filesystem::path p = argv[a];
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (!e.is_regular_file()) continue;
        failed += replay(e.path());
        ++inputs;
      }
    } else {
      failed += replay(p);
      ++inputs;
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "usage: %s FILE|DIR...: no input found\n", argv[0]);
    return 1;
  }
  std::printf("%d inputs replayed\n", inputs);
  return failed == 0 ? 0 : 1;
}
