#include "distmm/matrix_io.hpp"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include "distmm/error.hpp"

namespace distmm {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& flag, const std::string& path, const std::string& what) {
  throw InputError(flag + " " + escaped_path(path) + ": " + what, -1, flag);
}

std::string read_all(const std::string& path, const std::string& flag) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(flag, path, "no such file");
  if (fs::is_directory(path, ec)) fail(flag, path, "is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(flag, path, std::string("cannot be read: ") + std::strerror(errno));
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) fail(flag, path, "cannot be read");
  return content.str();
}

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r");
  return s.substr(first, last - first + 1);
}

// The fields of one line: separated by commas (csv) or by blanks (txt), trimmed.
std::vector<std::string_view> split_fields(std::string_view line, MatrixFormat format) {
  std::vector<std::string_view> fields;
  if (format == MatrixFormat::csv) {
    std::size_t start = 0;
    while (true) {
      const auto comma = line.find(',', start);
      fields.push_back(trim(line.substr(start, comma - start)));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    return fields;
  }
  std::size_t start = line.find_first_not_of(" \t\r");
  while (start != std::string_view::npos) {
    const auto end = line.find_first_of(" \t\r", start);
    fields.push_back(line.substr(start, end - start));
    start = line.find_first_not_of(" \t\r", end);
  }
  return fields;
}

// Checks that text is a rectangular table of finite numbers; Armadillo then parses it.
// Armadillo's own csv reader pads ragged rows and unreadable fields with zeros, so this check
// is what makes bad data an error.
void validate_table(std::string_view text, MatrixFormat format, const std::string& flag,
                    const std::string& path) {
  // Blank lines at the end of the file are ignored; a blank line between rows is an error.
  const auto last = text.find_last_not_of(" \t\r\n");
  if (last == std::string_view::npos) fail(flag, path, "is empty");
  text = text.substr(0, last + 1);
  std::size_t expected = 0;
  for (std::size_t line_no = 1; !text.empty() || line_no == 1; ++line_no) {
    const auto eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    const std::string where = "line " + std::to_string(line_no);
    if (trim(line).empty()) fail(flag, path, where + " is blank");
    const auto fields = split_fields(line, format);
    for (std::size_t f = 0; f < fields.size(); ++f) {
      const std::string at = where + ", value " + std::to_string(f + 1);
      std::string_view number = fields[f];
      if (number.empty()) fail(flag, path, at + " is empty");
      if (number.front() == '+') number.remove_prefix(1);
      double value = 0;
      const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
      if (ec == std::errc::result_out_of_range) {
        fail(flag, path, at + " " + quote(fields[f]) + " is out of range");
      }
      if (ec != std::errc{} || end != number.data() + number.size()) {
        fail(flag, path, at + " " + quote(fields[f]) + " is not a number");
      }
      if (!std::isfinite(value)) {
        fail(flag, path, at + " " + quote(fields[f]) + " is not finite");
      }
    }
    if (line_no == 1) expected = fields.size();
    if (fields.size() != expected) {
      fail(flag, path,
           where + " has " + std::to_string(fields.size()) + " values, line 1 has " +
               std::to_string(expected));
    }
  }
}

}  // namespace

MatrixFormat format_of(const std::string& path, const std::string& flag) {
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".csv") return MatrixFormat::csv;
  if (ext == ".txt") return MatrixFormat::txt;
  if (ext == ".bin") return MatrixFormat::bin;
  fail(flag, path, "unknown format " + quote(ext) + " (use .csv, .txt or .bin)");
}

namespace {

// Armadillo's binary format: "ARMA_MAT_BIN_FN008\n<rows> <cols>\n", then rows x cols doubles.
// The sizes are checked against the file's length before Armadillo allocates what the header
// says (a 60-byte file claiming 10^11 x 2 had it ask for 1.7 TB).
void check_binary_header(const std::string& content, const std::string& flag,
                         const std::string& path) {
  static const std::string magic = "ARMA_MAT_BIN_FN008\n";
  const auto bad = [&] { fail(flag, path, "is not an Armadillo binary matrix of doubles"); };
  if (content.compare(0, magic.size(), magic) != 0) bad();
  const std::size_t end = content.find('\n', magic.size());
  if (end == std::string::npos || end - magic.size() > 48) bad();
  unsigned long long rows = 0, cols = 0;
  const char* at = content.data() + magic.size();
  const char* stop = content.data() + end;
  auto [p, ec] = std::from_chars(at, stop, rows);
  if (ec != std::errc() || p == stop || *p != ' ') bad();
  auto [q, ec2] = std::from_chars(p + 1, stop, cols);
  if (ec2 != std::errc() || q != stop) bad();
  const std::size_t data = content.size() - end - 1;
  // Compared without multiplying first: the header's product may not fit in 64 bits.
  const bool fits = rows == 0 || cols <= data / sizeof(double) / rows;
  if (!fits || rows * cols * sizeof(double) != data) {
    fail(flag, path,
         "says " + std::to_string(rows) + " x " + std::to_string(cols) + " doubles but holds " +
             std::to_string(data) + " bytes of them");
  }
}

}  // namespace

arma::mat load_matrix(const std::string& path, const std::string& flag) {
  const MatrixFormat format = format_of(path, flag);
  const std::string content = read_all(path, flag);
  if (content.empty()) fail(flag, path, "is empty");
  arma::mat x;
  std::istringstream in(content);
  if (format == MatrixFormat::bin) {
    check_binary_header(content, flag, path);
    if (!x.load(in, arma::arma_binary)) {
      fail(flag, path, "is not an Armadillo binary matrix of doubles");
    }
    if (x.is_empty()) fail(flag, path, "is empty (0 rows or 0 columns)");
    if (!x.is_finite()) fail(flag, path, "holds a value that is not finite");
    return x;
  }
  validate_table(content, format, flag, path);
  if (!x.load(in, format == MatrixFormat::csv ? arma::csv_ascii : arma::raw_ascii)) {
    fail(flag, path, "could not be parsed");
  }
  return x;
}

void check_writable(const std::string& path, const std::string& flag) {
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    fail(flag, path, "directory " + dir.string() + " does not exist");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    fail(flag, path, "directory " + dir.string() + " is not writable");
  }
  if (fs::is_directory(target, ec)) fail(flag, path, "is a directory");
}

void check_output_path(const std::string& path, const std::string& flag) {
  format_of(path, flag);
  check_writable(path, flag);
}

namespace {

// Writes through `write` into a temporary file beside `path`, then renames it over `path`.
template <typename Write>
void write_atomically(const std::string& path, const std::string& flag, Write&& write) {
  check_writable(path, flag);
  const fs::path target(path);
  fs::path tmp = target;
  tmp.replace_filename(target.filename().string().insert(0, 1, '.'));
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const bool ok = out && write(out);
    out.flush();
    if (!ok || !out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      fail(flag, path, "could not be written");
    }
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    fail(flag, path, "could not be written: " + ec.message());
  }
}

}  // namespace

void save_text(const std::string& text, const std::string& path, const std::string& flag) {
  write_atomically(path, flag, [&](std::ostream& out) { return static_cast<bool>(out << text); });
}

void save_matrix(const arma::mat& x, const std::string& path, const std::string& flag) {
  const MatrixFormat format = format_of(path, flag);
  write_atomically(path, flag, [&](std::ostream& out) {
    return x.save(out, format == MatrixFormat::csv   ? arma::csv_ascii
                       : format == MatrixFormat::txt ? arma::raw_ascii
                                                     : arma::arma_binary);
  });
}

}  // namespace distmm
