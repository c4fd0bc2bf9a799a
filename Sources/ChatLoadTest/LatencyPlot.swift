import Foundation

/// HdrHistogram's percentile plot as an SVG picture: latency (y, milliseconds) against the
/// percentile (x, on the log scale of 1/(1 − p), so 90%, 99%, 99.9%, … are evenly spaced), one
/// line per run, so runs are compared on one set of axes. No plotting library and no browser
/// script: the file opens anywhere an SVG does.
public enum LatencyPlot {
    /// One run's distribution: its label and its points.
    public struct Series: Sendable, Equatable {
        /// What the legend calls the run.
        public var label: String
        /// The points, in increasing percentile: the percentile as a fraction (0…1) and the
        /// latency in milliseconds.
        public var points: [(percentile: Double, milliseconds: Double)]

        /// A series of `points`.
        public init(label: String, points: [(percentile: Double, milliseconds: Double)]) {
            self.label = label
            self.points = points
        }

        /// The series of a `.hgrm` file (HdrHistogram's percentile distribution, values in
        /// milliseconds, as `chat-loadtest --hgrm` writes); nil if it holds no data row.
        public init?(label: String, hgrm text: String) {
            var points: [(percentile: Double, milliseconds: Double)] = []
            for line in text.split(separator: "\n") {
                let columns = line.split(separator: " ", omittingEmptySubsequences: true)
                // A data row: Value, Percentile, TotalCount, 1/(1-Percentile) ("inf" on the last).
                guard columns.count == 4, let value = Double(columns[0]), let percentile = Double(columns[1]),
                    Double(columns[2]) != nil, (0...1).contains(percentile)
                else { continue }
                points.append((percentile, value))
            }
            guard !points.isEmpty else { return nil }
            self.init(label: label, points: points)
        }

        /// The latency at `percentile` (the first point at or past it).
        func value(at percentile: Double) -> Double {
            points.first { $0.percentile >= percentile }?.milliseconds ?? points.last?.milliseconds ?? 0
        }

        /// Equal labels and points.
        public static func == (lhs: Series, rhs: Series) -> Bool {
            lhs.label == rhs.label && lhs.points.elementsEqual(rhs.points) { $0 == $1 }
        }
    }

    static let width = 960.0
    static let height = 540.0
    static let margin = (left: 80.0, right: 270.0, top: 50.0, bottom: 60.0)
    /// Colour-blind-safe (Okabe–Ito), in the order runs are given.
    static let colours = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]

    /// The picture of `series` with `title` above it.
    public static func svg(_ series: [Series], title: String = "Latency by percentile") -> String {
        let plotWidth = width - margin.left - margin.right
        let plotHeight = height - margin.top - margin.bottom
        // The x axis runs to the nines the data reaches: 99.9% when the worst is at 99.95%.
        let highest = series.flatMap { $0.points.map(\.percentile) }.filter { $0 < 1 }.max() ?? 0.99
        let decades = max(2, Int(log10(1 / (1 - highest)).rounded(.up)))
        let yMax = niceCeiling(series.flatMap { $0.points.map(\.milliseconds) }.max() ?? 1)
        func x(_ percentile: Double) -> Double {
            let position = min(log10(1 / max(1e-12, 1 - percentile)), Double(decades))
            return margin.left + plotWidth * position / Double(decades)
        }
        func y(_ milliseconds: Double) -> Double { margin.top + plotHeight * (1 - milliseconds / yMax) }

        var svg = """
            <?xml version="1.0" encoding="UTF-8"?>
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" viewBox="0 0 \(Int(width)) \(Int(height))" font-family="sans-serif" font-size="13">
            <rect width="100%" height="100%" fill="white"/>
            <text x="\(fmt(margin.left))" y="28" font-size="17" font-weight="bold">\(escape(title))</text>

            """
        // Grid and axes.
        for decade in 0...decades {
            let percentile = 1 - pow(10, -Double(decade))
            let px = x(percentile)
            svg += "<line x1=\"\(fmt(px))\" y1=\"\(fmt(margin.top))\" x2=\"\(fmt(px))\" y2=\"\(fmt(margin.top + plotHeight))\" stroke=\"#ddd\"/>\n"
            svg += "<text x=\"\(fmt(px))\" y=\"\(fmt(margin.top + plotHeight + 20))\" text-anchor=\"middle\">\(percentileLabel(decade))</text>\n"
        }
        for step in 0...5 {
            let value = yMax * Double(step) / 5
            let py = y(value)
            svg += "<line x1=\"\(fmt(margin.left))\" y1=\"\(fmt(py))\" x2=\"\(fmt(margin.left + plotWidth))\" y2=\"\(fmt(py))\" stroke=\"#ddd\"/>\n"
            // One format for the whole axis, as fine as its step needs: 0, 20, 40 or 0.0, 0.2, 0.4.
            let decimals = max(0, Int(-log10(yMax / 5).rounded(.down)))
            svg += "<text x=\"\(fmt(margin.left - 8))\" y=\"\(fmt(py + 4))\" text-anchor=\"end\">\(fixed(value, decimals))</text>\n"
        }
        svg += "<rect x=\"\(fmt(margin.left))\" y=\"\(fmt(margin.top))\" width=\"\(fmt(plotWidth))\" height=\"\(fmt(plotHeight))\" fill=\"none\" stroke=\"#444\"/>\n"
        svg += "<text x=\"\(fmt(margin.left + plotWidth / 2))\" y=\"\(fmt(height - 15))\" text-anchor=\"middle\">percentile</text>\n"
        svg += "<text transform=\"translate(22 \(fmt(margin.top + plotHeight / 2))) rotate(-90)\" text-anchor=\"middle\">latency (ms)</text>\n"
        // One line per run, and its legend entry with p50, p99 and the maximum.
        for (index, run) in series.enumerated() {
            let colour = colours[index % colours.count]
            let points = run.points.map { "\(fmt(x($0.percentile))),\(fmt(y($0.milliseconds)))" }.joined(separator: " ")
            svg += "<polyline class=\"series\" data-label=\"\(escape(run.label))\" fill=\"none\" stroke=\"\(colour)\" stroke-width=\"2\" points=\"\(points)\"/>\n"
            let legendY = margin.top + 10 + Double(index) * 44
            let legendX = margin.left + plotWidth + 20
            svg += "<line x1=\"\(fmt(legendX))\" y1=\"\(fmt(legendY))\" x2=\"\(fmt(legendX + 24))\" y2=\"\(fmt(legendY))\" stroke=\"\(colour)\" stroke-width=\"3\"/>\n"
            svg += "<text x=\"\(fmt(legendX + 32))\" y=\"\(fmt(legendY + 4))\">\(escape(run.label))</text>\n"
            let summary = "p50 \(number(run.value(at: 0.5))), p99 \(number(run.value(at: 0.99))), max \(number(run.points.last?.milliseconds ?? 0)) ms"
            svg += "<text x=\"\(fmt(legendX + 32))\" y=\"\(fmt(legendY + 21))\" fill=\"#555\" font-size=\"11\">\(summary)</text>\n"
        }
        svg += "</svg>\n"
        return svg
    }

    /// `0%`, `90%`, `99%`, `99.9%`, … for `decade` nines.
    static func percentileLabel(_ decade: Int) -> String {
        switch decade {
        case 0: "0%"
        case 1: "90%"
        case 2: "99%"
        default: "99." + String(repeating: "9", count: decade - 2) + "%"
        }
    }

    /// The smallest 1, 2 or 5 × 10ⁿ at or above `value`, so the y axis ends on a round number.
    static func niceCeiling(_ value: Double) -> Double {
        guard value > 0 else { return 1 }
        let magnitude = pow(10, (log10(value)).rounded(.down))
        for factor in [1.0, 2, 5, 10] where factor * magnitude >= value { return factor * magnitude }
        return 10 * magnitude
    }

    /// A latency for people: up to three significant digits, no exponent.
    static func number(_ value: Double) -> String {
        if value == 0 { return "0" }
        let decimals = value >= 100 ? 0 : value >= 10 ? 1 : value >= 1 ? 2 : 3
        return fixed(value, decimals)
    }

    private static func fixed(_ value: Double, _ decimals: Int) -> String {
        let scale = pow(10, Double(decimals))
        let scaled = Int((value * scale).rounded())
        guard decimals > 0 else { return "\(scaled)" }
        let whole = scaled / Int(scale)
        let fraction = String(scaled % Int(scale))
        return "\(whole)." + String(repeating: "0", count: decimals - fraction.count) + fraction
    }

    private static func fmt(_ value: Double) -> String { fixed(value, 1) }

    /// `text` with XML's special characters escaped, for text and attribute values.
    static func escape(_ text: String) -> String {
        var escaped = ""
        for character in text {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&apos;"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}
