#include "distmm/error.hpp"

#include <cstdint>

namespace distmm {
namespace {

// The length of the valid UTF-8 sequence starting at text[i] (2 to 4 bytes), or 0.
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t j) { return static_cast<unsigned char>(text[j]); };
  const unsigned char lead = byte(i);
  std::size_t n = 0;
  std::uint32_t code = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    n = 2, code = lead & 0x1fu;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    n = 3, code = lead & 0x0fu;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    n = 4, code = lead & 0x07u;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  for (std::size_t j = 1; j < n; ++j) {
    if ((byte(i + j) & 0xc0u) != 0x80u) return 0;
    code = (code << 6) | (byte(i + j) & 0x3fu);
  }
  // Overlong forms, surrogates, beyond U+10FFFF; C1 controls (U+0080-U+009F) are escaped too.
  const std::uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < least[n] || (code >= 0xd800 && code <= 0xdfff) || code > 0x10ffff) return 0;
  if (code <= 0x9f) return 0;
  return n;
}

}  // namespace

std::string escaped(std::string_view text, std::size_t most) {
  static const char* const hex = "0123456789abcdef";
  std::string out;
  std::size_t shown = 0;  // characters, as a terminal shows them
  for (std::size_t i = 0; i < text.size();) {
    if (shown >= most) {
      out += "\u2026";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i, ++shown;
      continue;
    }
    if (const std::size_t n = c >= 0x80 ? utf8_sequence(text, i) : 0) {
      out.append(text.substr(i, n));
      i += n, ++shown;
      continue;
    }
    // Escapes count as the characters they print.
    const std::size_t before = out.size();
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out += {'\\', 'x', hex[c >> 4], hex[c & 15]};
    }
    shown += out.size() - before;
    ++i;
  }
  return out;
}

std::string quote(std::string_view text, std::size_t most) {
  std::string out(1, '\'');
  out += escaped(text, most);
  out += '\'';
  return out;
}

std::string escaped_path(std::string_view path, std::size_t most) {
  const std::string all = escaped(path, std::string::npos);
  if (all.size() <= most || most < 8) return all;
  // Its start and its end, where the file's name is; never inside a UTF-8 sequence.
  const auto continuation = [&](std::size_t i) {
    return (static_cast<unsigned char>(all[i]) & 0xc0u) == 0x80u;
  };
  std::size_t head = most / 3, tail = all.size() - (most - head - 1);
  while (head > 0 && continuation(head)) --head;
  while (tail < all.size() && continuation(tail)) ++tail;
  return all.substr(0, head) + "\u2026" + all.substr(tail);
}

std::string printable(std::string_view message, std::size_t most) {
  return escaped(message, most);
}

}  // namespace distmm
