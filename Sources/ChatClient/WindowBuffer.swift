import DequeModule

/// One window's lines, as they are drawn, bounded by a line count, and how far the user has
/// scrolled back in them.
///
/// The oldest lines go once `limit` is reached, so a window's memory is bounded by `limit`
/// times the length of its lines (a line is at most one message).
///
/// The view is scrolled by screen rows, not lines: a line wider than the terminal takes as many
/// rows as it wraps over, and a page back can end inside it. Where the view ends is kept as a
/// line and a row in it — `offset` whole lines below the view, then the last `hiddenRows` rows
/// of the line above them — rather than as a count of rows, which a resize would change. A line
/// arriving while scrolled back leaves the view where it is (the offset grows with it) until
/// the user pages down again.
public struct WindowBuffer: Sendable {
    /// The most lines the window keeps.
    public var limit: Int {
        didSet { trim() }
    }
    /// The lines, oldest first.
    public private(set) var lines: Deque<String> = []
    /// How many of the newest lines are below the view: 0 when the window shows its end.
    public private(set) var offset = 0
    /// How many of the last rows of the line the view ends in are below it too.
    public private(set) var hiddenRows = 0
    /// The calendar day of the newest line, to mark a change of day.
    public var lastDay: Int?
    /// How many lines have gone from the front (past the limit, or cleared): a line's number,
    /// `dropped` plus its index, stays the same while it is kept.
    private var dropped = 0
    /// The numbers of the lines `/lastlog` does not search, in order: its own answers, which
    /// would otherwise match the next search for the same text, and again the one after.
    private var unsearchable: Deque<Int> = []

    /// An empty buffer that keeps at most `limit` lines (at least 1).
    public init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// Whether the view is scrolled back, so that new lines are not on screen (`-- more --`).
    public var isScrolledBack: Bool { offset > 0 || hiddenRows > 0 }

    /// Adds `line` at the end; while scrolled back the view stays on the lines it showed.
    /// A line not `searchable` is left out of `matching` (what `/lastlog` itself shows).
    public mutating func append(_ line: String, searchable: Bool = true) {
        if !searchable { unsearchable.append(dropped + lines.count) }
        lines.append(line)
        if isScrolledBack { offset += 1 }
        trim()
    }

    /// Moves the view `count` rows of a terminal `columns` cells wide back (negative: forward).
    ///
    /// Going back stops where the first line is at the top of a screen of `screenRows` rows, so
    /// the oldest page is a full one; going forward stops at the end. Only the rows passed over
    /// are measured, so a page back in a 100,000-line window costs a page of lines.
    public mutating func scroll(rows count: Int, screenRows: Int, columns: Int) {
        guard !lines.isEmpty else { return }
        // The view's bottom row: row `height - 1 - hidden` of `lines[index]`.
        var index = lines.count - 1 - offset
        var hidden = min(hiddenRows, height(index, columns) - 1)
        if count > 0 {
            var remaining = count
            while remaining > 0 {
                let above = height(index, columns) - hidden  // rows of this line at or above the bottom
                if remaining < above {
                    hidden += remaining
                    break
                }
                guard index > 0 else {
                    hidden = height(index, columns) - 1  // the first line's first row
                    break
                }
                remaining -= above
                index -= 1
                hidden = 0
            }
            // Back down until a whole screen is above the bottom row, if the window has one.
            var shown = height(index, columns) - hidden
            var top = index
            while shown < screenRows, top > 0 {
                top -= 1
                shown += height(top, columns)
            }
            if shown < screenRows {
                (index, hidden) = position(after: screenRows - shown, from: index, hidden: hidden, columns: columns)
            }
        } else {
            (index, hidden) = position(after: -count, from: index, hidden: hidden, columns: columns)
        }
        offset = lines.count - 1 - index
        hiddenRows = hidden
    }

    /// The view's bottom row moved `count` rows forward from row `height - 1 - hidden` of
    /// `lines[index]`, stopping at the last row of the last line.
    private func position(after count: Int, from index: Int, hidden: Int, columns: Int) -> (Int, Int) {
        var index = index
        var hidden = hidden
        var remaining = count
        while remaining > 0 {
            if hidden > 0 {
                let step = min(hidden, remaining)
                hidden -= step
                remaining -= step
            } else if index < lines.count - 1 {
                index += 1
                hidden = height(index, columns) - 1
                remaining -= 1
            } else {
                break
            }
        }
        return (index, hidden)
    }

    /// Shows the end again.
    public mutating func scrollToEnd() {
        offset = 0
        hiddenRows = 0
    }

    /// Forgets every line (`/clear`).
    public mutating func clear() {
        dropped += lines.count
        lines = []
        unsearchable = []
        scrollToEnd()
    }

    /// The last `count` rows of the view on a terminal `columns` cells wide, each at most
    /// `columns` cells (`TerminalText.rows`): those ending where the view ends. A line taller
    /// than the screen shows the part that fits — its last rows at the end of the window, the
    /// rows it is scrolled to otherwise — and never pushes the lines above it off unshown.
    public func view(rows count: Int, columns: Int) -> [String] {
        guard !lines.isEmpty, count > 0 else { return [] }
        var index = lines.count - 1 - offset
        var rows = TerminalText.rows(of: lines[index], columns: columns)
        rows.removeLast(min(hiddenRows, rows.count - 1))
        var shown = rows.suffix(count)
        while shown.count < count, index > 0 {
            index -= 1
            rows = TerminalText.rows(of: lines[index], columns: columns)
            shown = (rows.suffix(count - shown.count) + shown)[...]
        }
        return Array(shown)
    }

    /// The rows `lines[index]` wraps over on a terminal `columns` cells wide.
    private func height(_ index: Int, _ columns: Int) -> Int {
        TerminalText.rows(of: lines[index], columns: columns).count
    }

    /// The lines whose visible text contains `text`, ignoring letter case (`/lastlog`), but
    /// for those appended as not searchable.
    public func matching(_ text: String) -> [String] {
        let key = text.lowercased()
        var result: [String] = []
        var skipped = unsearchable.startIndex
        for (index, line) in lines.enumerated() {
            let number = dropped + index
            while skipped < unsearchable.endIndex, unsearchable[skipped] < number { skipped += 1 }
            if skipped < unsearchable.endIndex, unsearchable[skipped] == number { continue }
            if TerminalText.plain(line).lowercased().contains(key) { result.append(line) }
        }
        return result
    }

    private mutating func trim() {
        let excess = lines.count - limit
        guard excess > 0 else { return }
        lines.removeFirst(excess)
        dropped += excess
        while let first = unsearchable.first, first < dropped { unsearchable.removeFirst() }
        if offset > lines.count - 1 {
            // The line the view ended in went: the view ends at the first line's last row.
            offset = max(0, lines.count - 1)
            hiddenRows = 0
        }
    }
}
