# Rules for this stage arrive with their issue (see DESIGN.md §2).
