import DequeModule

/// One window's lines, as they are drawn, bounded by a line count, and how far the user has
/// scrolled back in them.
///
/// The oldest lines go once `limit` is reached, so a window's memory is bounded by `limit`
/// times the length of its lines (a line is at most one message). `offset` counts lines from
/// the newest: 0 shows the end, and a line arriving while scrolled back leaves the view where
/// it is (the offset grows with it) until the user pages down again.
public struct WindowBuffer: Sendable {
    /// The most lines the window keeps.
    public var limit: Int {
        didSet { trim() }
    }
    /// The lines, oldest first.
    public private(set) var lines: Deque<String> = []
    /// How many of the newest lines are below the view: 0 when the window shows its end.
    public private(set) var offset = 0
    /// The calendar day of the newest line, to mark a change of day.
    public var lastDay: Int?

    /// An empty buffer that keeps at most `limit` lines (at least 1).
    public init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// Whether the view is scrolled back, so that new lines are not on screen (`-- more --`).
    public var isScrolledBack: Bool { offset > 0 }

    /// Adds `line` at the end; while scrolled back the view stays on the lines it showed.
    public mutating func append(_ line: String) {
        lines.append(line)
        if offset > 0 { offset += 1 }
        trim()
    }

    /// Moves the view `count` lines back (negative: forward), within the lines there are.
    public mutating func scroll(by count: Int) {
        offset = min(max(0, offset + count), max(0, lines.count - 1))
    }

    /// Shows the end again.
    public mutating func scrollToEnd() { offset = 0 }

    /// Forgets every line (`/clear`).
    public mutating func clear() {
        lines = []
        offset = 0
    }

    /// The last `count` lines of the view: those ending `offset` lines before the newest.
    public func view(count: Int) -> [String] {
        let end = lines.count - offset
        let start = max(0, end - max(0, count))
        return Array(lines[start..<end])
    }

    /// The lines whose visible text contains `text`, ignoring letter case (`/lastlog`).
    public func matching(_ text: String) -> [String] {
        let key = text.lowercased()
        return lines.filter { TerminalText.plain($0).lowercased().contains(key) }
    }

    private mutating func trim() {
        let excess = lines.count - limit
        guard excess > 0 else { return }
        lines.removeFirst(excess)
        offset = min(offset, max(0, lines.count - 1))
    }
}
