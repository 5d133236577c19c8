// What error messages show of input: escaped, cut, one line (error.hpp).
#include <gtest/gtest.h>

#include <string>

#include "distmm/error.hpp"

namespace distmm {
namespace {

TEST(ErrorText, ControlBytesAndInvalidUtf8AreEscaped) {
  EXPECT_EQ(escaped("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(escaped("\x1b[31m"), "\\x1b[31m");
  EXPECT_EQ(escaped(std::string("\x00\x7f", 2)), "\\x00\\x7f");
  EXPECT_EQ(escaped("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(escaped("\xc3"), "\\xc3");                    // a sequence cut short
  EXPECT_EQ(escaped("\xc0\xaf"), "\\xc0\\xaf");           // an overlong '/'
  EXPECT_EQ(escaped("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(escaped("\xc2\x9b"), "\\xc2\\x9b");           // C1 CSI, a terminal's escape too
  EXPECT_EQ(escaped("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");  // kept
  EXPECT_EQ(quote("x y"), "'x y'");
}

TEST(ErrorText, LongTextIsCutWithAnEllipsis) {
  EXPECT_EQ(escaped(std::string(10, 'a'), 4), "aaaa\xe2\x80\xa6");
  EXPECT_EQ(escaped(std::string(4, 'a'), 4), "aaaa");
  // Escapes count as what they print: 4 bytes show as 16 characters.
  EXPECT_EQ(escaped("\x01\x02\x03\x04\x05", 8), "\\x01\\x02\xe2\x80\xa6");
  const std::string line = printable(std::string(1000, '\n'));
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_LE(line.size(), 404u);
}

TEST(ErrorText, LongPathsKeepTheirStartAndFileName) {
  const std::string path = "/tmp/" + std::string(200, 'd') + "/name.csv";
  const std::string shown = escaped_path(path, 60);
  EXPECT_LE(shown.size(), 62u);  // the ellipsis is 3 bytes
  EXPECT_EQ(shown.rfind("/name.csv"), shown.size() - 9);
  EXPECT_EQ(shown.find("/tmp/"), 0u);
  EXPECT_EQ(escaped_path("/short/a\nb.csv"), "/short/a\\nb.csv");
}

}  // namespace
}  // namespace distmm
