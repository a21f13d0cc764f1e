#include "exporter/content_negotiation.h"

#include <gtest/gtest.h>

namespace tpe {
namespace {

constexpr auto kText = ExpositionFormat::kText;
constexpr auto kProtobuf = ExpositionFormat::kProtobuf;

TEST(NegotiateExpositionTest, WhatPrometheusSends) {
  // Prometheus 2.42 with --enable-feature=native-histograms (captured from a scrape).
  EXPECT_EQ(NegotiateExposition("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                                "encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,"
                                "application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,"
                                "*/*;q=0.1"),
            kProtobuf);
  // An older client's order (protobuf preferred over text by q).
  EXPECT_EQ(NegotiateExposition("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                                "encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.1"),
            kProtobuf);
  // Without it (captured; OpenMetrics is not served: text).
  EXPECT_EQ(NegotiateExposition("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                                "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
            kText);
}

TEST(NegotiateExpositionTest, TextUnlessProtobufIsAskedForAndPreferred) {
  EXPECT_EQ(NegotiateExposition(""), kText);
  EXPECT_EQ(NegotiateExposition("*/*"), kText);
  EXPECT_EQ(NegotiateExposition("text/plain"), kText);
  EXPECT_EQ(NegotiateExposition("application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily"),
            kProtobuf);  // encoding absent: delimited
  EXPECT_EQ(NegotiateExposition(
                "Application/Vnd.Google.Protobuf; PROTO=\"io.prometheus.client.MetricFamily\"; Encoding=delimited"),
            kProtobuf);
  // Preferred less than text, or refused.
  EXPECT_EQ(NegotiateExposition("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;q=0.2,"
                                "text/plain;q=0.5"),
            kText);
  EXPECT_EQ(NegotiateExposition("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;q=0"), kText);
  // Equal quality: protobuf (it was asked for by name).
  EXPECT_EQ(NegotiateExposition("text/plain,application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily"),
            kProtobuf);
}

TEST(NegotiateExpositionTest, OtherMessagesEncodingsAndBadQualitiesAreNotProtobuf) {
  EXPECT_EQ(NegotiateExposition("application/vnd.google.protobuf"), kText);  // no proto
  EXPECT_EQ(NegotiateExposition("application/vnd.google.protobuf;proto=io.prometheus.client.Metric"), kText);
  EXPECT_EQ(NegotiateExposition("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                                "encoding=text"),
            kText);
  for (const char* q : {"q=x", "q=2", "q=-1", "q=", "q=0.5x", "q=nan"}) {
    EXPECT_EQ(NegotiateExposition(
                  std::string("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;") + q),
              kText)
        << q;
  }
  EXPECT_EQ(NegotiateExposition(",,;;=,application/vnd.google.protobuf;;proto=io.prometheus.client.MetricFamily;"),
            kProtobuf);
}

}  // namespace
}  // namespace tpe
