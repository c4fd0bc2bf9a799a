import Foundation
#if canImport(FoundationXML)
    import FoundationXML
#endif
import Testing

@testable import ChatLoadTest

/// `chat-loadtest --plot`: saved `.hgrm` runs read back, and the SVG picture well-formed, with a
/// line and a legend entry per run on HdrHistogram's percentile axis.
@Suite struct LatencyPlotTests {
    /// A small `.hgrm` file as HdrHistogram writes it: values in milliseconds.
    static let hgrm = """
               Value     Percentile TotalCount 1/(1-Percentile)

               0.050 0.000000000000          1           1.00
               0.100 0.500000000000        500           2.00
               0.400 0.900000000000        900          10.00
               1.200 0.990000000000        990         100.00
               3.500 0.999000000000        999        1000.00
               9.000 1.000000000000       1000            inf
        #[Mean    =        0.150, StdDeviation   =        0.300]
        #[Max     =        9.000, Total count    =         1000]
        #[Buckets =           20, SubBuckets     =         2048]
        """

    @Test func anHgrmFileGivesItsPercentilesAndValues() throws {
        let series = try #require(LatencyPlot.Series(label: "run", hgrm: Self.hgrm), "the rows are read")
        #expect(series.points.map(\.percentile) == [0, 0.5, 0.9, 0.99, 0.999, 1])
        #expect(series.points.map(\.milliseconds) == [0.05, 0.1, 0.4, 1.2, 3.5, 9])
        #expect(LatencyPlot.Series(label: "empty", hgrm: "not a histogram\n") == nil, "a file without rows is refused")
    }

    @Test func thePictureIsWellFormedXMLWithALineAndALegendPerRun() throws {
        let before = try #require(LatencyPlot.Series(label: "before <metrics>", hgrm: Self.hgrm))
        var after = before
        after.label = "after & on"
        after.points = after.points.map { ($0.percentile, $0.milliseconds * 2) }
        let svg = LatencyPlot.svg([before, after], title: "two runs")
        let delegate = SVGCollector()
        let parser = XMLParser(data: Data(svg.utf8))
        parser.delegate = delegate
        #expect(parser.parse(), "the SVG is well-formed XML: \(String(describing: parser.parserError))")
        #expect(delegate.root == "svg")
        #expect(delegate.seriesLabels == ["before <metrics>", "after & on"], "one line per run, labelled")
        #expect(delegate.pointCounts == [6, 6], "every point of each run is drawn")
        for label in ["0%", "90%", "99%", "99.9%", "latency (ms)", "percentile", "two runs", "before <metrics>", "after & on"] {
            #expect(delegate.texts.contains(label), "the picture shows \(label): \(delegate.texts)")
        }
        #expect(delegate.texts.contains("p50 0.100, p99 1.20, max 9.00 ms"), "the legend sums the run up: \(delegate.texts)")
        // The y axis ends on a round number above the worst latency (18 ms → 20), in steps of 4.
        #expect(["0", "4", "8", "12", "16", "20"].allSatisfy(delegate.texts.contains), "the y axis: \(delegate.texts)")
    }

    @Test func theAxisReachesTheNinesTheDataReaches() {
        #expect(LatencyPlot.percentileLabel(0) == "0%")
        #expect(LatencyPlot.percentileLabel(4) == "99.99%")
        #expect(LatencyPlot.niceCeiling(0.37) == 0.5)
        #expect(LatencyPlot.niceCeiling(18) == 20)
        #expect(LatencyPlot.niceCeiling(100) == 100)
    }
}

/// Collects what the tests look at in an SVG document.
private final class SVGCollector: NSObject, XMLParserDelegate {
    var root: String?
    var seriesLabels: [String] = []
    var pointCounts: [Int] = []
    var texts: [String] = []
    private var text = ""

    func parser(
        _ parser: XMLParser, didStartElement element: String, namespaceURI: String?, qualifiedName: String?,
        attributes: [String: String] = [:]
    ) {
        if root == nil { root = element }
        if element == "polyline", attributes["class"] == "series" {
            seriesLabels.append(attributes["data-label"] ?? "")
            pointCounts.append(attributes["points"]?.split(separator: " ").count ?? 0)
        }
        text = ""
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) { text += string }

    func parser(_ parser: XMLParser, didEndElement element: String, namespaceURI: String?, qualifiedName: String?) {
        if element == "text" { texts.append(text) }
        text = ""
    }
}
