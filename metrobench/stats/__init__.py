"""Statistics over scores and ratings: bootstrap intervals, seed spread, rater agreement."""
