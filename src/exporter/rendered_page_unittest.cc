#include "exporter/rendered_page.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <ostream>
#include <sstream>
#include <string>

namespace tpe {
namespace {

const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

TEST(RenderedPageTest, FromTextIsByteExactInWholePages) {
  const std::string text = "up 1\n";
  RenderedPage page = RenderedPage::FromText(text);
  EXPECT_EQ(page.text(), text);
  EXPECT_EQ(page.mapped_bytes(), kPage);
  RenderedPage empty = RenderedPage::FromText("");
  EXPECT_EQ(empty.text(), "");
  EXPECT_EQ(RenderedPage().mapped_bytes(), 0u);
  RenderedPage moved = std::move(page);
  EXPECT_EQ(moved.text(), text);
}

// Written through an std::ostream from a one-page guess, the mapping grows by mremap (moving
// when it must) across many writes of every size; the text is byte-exact and the spare pages
// are given back at Finish.
TEST(RenderedPageTest, WriterGrowsAndTrims) {
  PageWriter writer(0);
  std::ostream out(&writer);
  std::string expected;
  for (int i = 0; i < 200000; ++i) {
    out << "series_" << i << ' ' << i * 0.5 << '\n';
    expected += "series_" + std::to_string(i) + ' ';
    std::ostringstream v;
    v << i * 0.5;
    expected += v.str() + '\n';
    if (i % 1000 == 0) {
      const std::string chunk(static_cast<size_t>(i % 7919), 'x');
      out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      expected += chunk;
    }
  }
  ASSERT_TRUE(out.good());
  RenderedPage page = writer.Finish();
  EXPECT_EQ(page.text().size(), expected.size());
  EXPECT_TRUE(page.text() == expected);
  EXPECT_EQ(page.mapped_bytes(), (expected.size() + kPage - 1) / kPage * kPage);
  // The writer is empty afterwards.
  RenderedPage again = writer.Finish();
  EXPECT_EQ(again.text(), "");
}

TEST(RenderedPageTest, TextOfWholePagesMapsExactlyThem) {
  const std::string text(3 * kPage, 'a');
  PageWriter writer(text.size());
  writer.sputn(text.data(), static_cast<std::streamsize>(text.size()));
  RenderedPage page = writer.Finish();
  EXPECT_TRUE(page.text() == text);
  EXPECT_EQ(page.mapped_bytes(), 3 * kPage);
}

}  // namespace
}  // namespace tpe
