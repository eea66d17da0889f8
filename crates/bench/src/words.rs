//! The word pool random prompts are drawn from: common, short English words, each a single
//! token (with its leading space) in GPT-2-style and SentencePiece vocabularies of 32k+ entries,
//! so that one word is about one token before the tokenizer confirms the exact count.

/// Pool of prompt words.
pub const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at",
    "from", "his", "her", "it", "an", "are", "were", "which", "be", "this", "had", "or", "has",
    "not", "but", "first", "one", "their", "its", "new", "after", "who", "they", "have", "two",
    "been", "also", "year", "time", "all", "during", "other", "when", "there", "into", "more",
    "would", "school", "some", "city", "about", "only", "most", "over", "world", "three", "where",
    "team", "music", "film", "life", "many", "later", "between", "made", "while", "then", "part",
    "both", "known", "season", "early", "under", "years", "album", "such", "well", "state",
    "since", "through", "out", "area", "work", "family", "before", "second", "used", "show",
    "them", "group", "name", "song", "game", "house", "long", "four", "high", "than", "these",
    "each", "because", "water", "river", "north", "south", "east", "west", "town", "church",
    "line", "book", "war", "party", "club", "road", "local", "public", "small", "large", "great",
    "former", "white", "black", "green", "red", "blue", "light", "night", "day", "week", "month",
    "home", "land", "sea", "island", "park", "field", "market", "money", "power", "people",
    "story", "word", "number", "point", "place", "case", "system", "program", "question", "form",
    "head", "hand", "side", "face", "body", "mind", "voice", "heart", "door", "room", "window",
    "table", "paper", "letter", "picture", "stone", "tree", "flower", "garden", "horse", "dog",
    "bird", "fish", "food", "bread", "milk", "coffee", "tea", "wine", "fire", "wind", "rain",
    "snow", "sun", "moon", "star", "sky", "cloud", "summer", "winter", "spring", "morning",
    "evening", "old", "young", "good", "best", "last", "next", "few", "open", "free", "full",
    "hard", "easy", "real", "true", "clear", "simple", "strong", "quick", "slow", "warm", "cold",
    "dark", "bright", "quiet", "happy", "ready", "left", "right", "near", "far", "above", "below",
    "again", "still", "often", "never", "always", "even", "just", "very", "much", "here", "now",
    "make", "take", "give", "find", "think", "tell", "call", "keep", "bring", "begin", "help",
    "turn", "move", "play", "run", "live", "hold", "write", "read", "learn", "change", "follow",
    "stop", "speak", "walk", "watch", "build", "stay", "fall", "grow", "send", "pay", "meet",
];
