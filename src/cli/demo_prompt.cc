// The built-in demo prompt of `kascade generate --demo`. The document is an
// invented annual report (every name, date and figure in it is fictional); the
// fact the question asks about sits roughly halfway through it.
#include "cli/demo_prompt.h"

namespace kascade::cli {

namespace {

const char kDocument[] =
    R"DOC(ROTKAMM MOUNTAIN RAILWAY COOPERATIVE
Annual Report for the Financial Year 2023
Presented to the General Assembly of Members, Aschental, 27 April 2024)DOC"
    R"DOC(

1. Letter from the Chair

Dear members, dear friends of the railway,

The year 2023 was the busiest in the one hundred and four years of our cooperative. Our trains
carried 612,480 passengers between Aschental and the summit station at Rotkamm, an increase of 9.3
percent over 2022 and almost 40,000 more than in the previous record year of 2019. We achieved this
while the lower section of the line was closed for five weeks in spring for the rebuilding of the
Grauwand viaduct, and while the whole valley endured one of the wettest Augusts since records began
at the Aschental weather station in 1931.

None of this would have been possible without the 143 men and women who work for the railway and the
2,916 members who own it. When the viaduct works fell behind schedule in early May, the track crew
under Benedikt Raunegger worked through two weekends so that we could reopen on the promised date of
20 May. When the storm of 17 August washed gravel and mud across the line at Kapellenboden,
volunteers from the fire brigade of Unterschwend helped our staff clear it in a single night. I want
to thank every one of them.

Financially, the cooperative closed the year with a surplus of 418,200 francs after depreciation,
which the Board proposes to allocate in full to the rolling stock reserve. Revenue from fares
reached 14.7 million francs for the first time. Costs also rose sharply, driven mainly by
electricity prices and by the wage agreement concluded in January, and I will not pretend that the
coming years will be easy. The plans described at the end of this report, above all the renewal of
the upper section and the replacement of our oldest railcars, will require more money than the
railway has ever spent in so short a time.

This is my last annual report as Chair. After eleven years on the Board, six of them in this role, I
will not stand for re-election in April. It has been an honour to serve a railway that has belonged
to the people of this valley since 1919.

Cordula Hächler-Brun
Chair of the Board)DOC"
    R"DOC(

2. A Short History of the Cooperative

The idea of a railway to the Rotkamm ridge is older than the cooperative itself. In 1897 a hotel
owner from Aschental, Jakob Wyss-Emmenegger, commissioned a survey for a steam rack railway to carry
his guests to the viewpoint above the Kessel glacier. The survey was completed, but the investors he
hoped to attract from the cities of the plain lost interest after a rival project at Lindenfluh went
bankrupt in 1901, and the plans stayed in a drawer of the Hotel Krone for almost twenty years.

The revival came from an unexpected direction. After the First World War the farmers of the upper
valley, who still drove their cattle and carried their cheese on foot over the Kapellenboden path,
wanted a reliable way to move goods to the market in Aschental. In March 1919, forty-one families,
the municipality of Unterschwend and the parish of Sankt Urban founded the Rotkamm Mountain Railway
Cooperative with a share capital of 186,000 francs. Each family bought at least one share of 500
francs; many paid in instalments over three years, and some paid partly in labour on the
construction site.

Construction of the first section, from Aschental (812 metres above sea level) to Kapellenboden
(1,460 metres), began in June 1920 and was finished in September 1922. The line was built to metre
gauge with a ladder rack on the steeper stretches and was electrified from the beginning, using
power from a small hydroelectric plant on the Schwendbach stream that the cooperative built at the
same time and still owns today. The first regular train was driven by Alois Bürgi, a former
blacksmith who had trained for six months at a lowland tramway. The extension to the summit station
at Rotkamm (2,214 metres) followed between 1927 and 1930 and included the 1,180-metre Kesseltunnel
and the Grauwand viaduct.

The railway survived the depression of the 1930s largely because of freight: milk, cheese, timber
and, for a few years, slate from the quarry at Hinterberg. Tourism grew slowly after the Second
World War and then very quickly from the 1960s, when the ski area at Kapellenboden was opened.
Freight traffic ended in 1974, and the last cheese wagon was retired in a small ceremony that older
members still remember. In 1987 the cooperative bought the upper chairlift from its private owners,
and in 2004 it merged with the Kapellenboden Ski Lift Company, so that today a single organisation
runs the railway, four ski lifts and the summit restaurant.

Throughout these hundred years the cooperative has kept its founding principle: one member, one
vote, regardless of how many shares a member holds. The municipality of Unterschwend remains the
largest single shareholder with 11.2 percent of the capital, but it has the same single vote as a
retired shepherd who owns one share inherited from his grandmother.)DOC"
    R"DOC(

3. The Line and Its Infrastructure

The Rotkamm line is 9.6 kilometres long and climbs 1,402 metres. The maximum gradient is 22 percent,
on the section below the Kesseltunnel, and 6.1 kilometres of the line are equipped with rack. There
are five stations and stops: Aschental, Brunnegg, Kapellenboden, Kesselhütte and Rotkamm. Brunnegg
and Kesselhütte are request stops; Kapellenboden is the main passing point and the location of the
depot and workshop.

Aschental station, where passengers change from the valley railway, was last rebuilt in 2011 and has
a covered platform for two trains. Kapellenboden has three tracks, a waiting room, a ticket office
open during the seasons and direct access to the ski lifts. The summit station at Rotkamm lies
partly inside the rock and is connected to the restaurant and the viewing terrace by a gallery of
140 metres.

The largest infrastructure project of the year was the rebuilding of the Grauwand viaduct between
Brunnegg and Kapellenboden. The original steel structure of 1929 had been strengthened twice, in
1958 and 1991, but inspections in 2020 found fatigue cracking in the lower chords that could no
longer be repaired economically. The new viaduct, a concrete arch with a span of 64 metres designed
by the engineering office Pfenninger and Lutz of Sankt Urban, was built alongside the old one from
September 2022 onwards. During the closure from 15 April to 20 May 2023 the old structure was
dismantled and the track was moved onto the new deck. The total cost was 7.84 million francs, of
which the canton contributed 3.1 million and the federal railway infrastructure fund 2.4 million.
The remaining 2.34 million was financed by a loan from the Aschental Savings Bank at a fixed rate of
2.15 percent over twenty years.

Elsewhere, the track crew renewed 820 metres of rack between Kesselhütte and the summit, replaced
1,650 sleepers, and rebuilt the drainage along the Kapellenboden curve, which had caused repeated
problems with ice in previous winters. The signalling system, installed in 1996, was upgraded with
new axle counters at both ends of the Kesseltunnel. The overhead line between Aschental and Brunnegg
was re-tensioned and 41 masts were replaced.

The cooperative's own hydroelectric plant on the Schwendbach produced 3.92 gigawatt hours in 2023,
slightly below the ten-year average of 4.1 gigawatt hours because of the dry early summer. The
railway itself consumed 2.68 gigawatt hours, and the surplus was sold to the regional grid operator.
Because of high market prices in the first half of the year, electricity sales brought in 286,000
francs, an unusually large amount that we do not expect to see again.)DOC"
    R"DOC(

4. Rolling Stock

At the end of 2023 the cooperative owned eleven vehicles for passenger service, three service
locomotives and a small fleet of work wagons. The core of the passenger fleet consists of the four
articulated railcars BDhe 4/8 21 to 24, delivered by the Thalwerk company in 2008 and 2009. Each
seats 112 passengers and has room for 38 standing passengers, bicycles and prams. In 2023 they ran a
combined 318,400 kilometres and achieved an availability of 96.4 percent.

The older railcars BDhe 4/4 11 to 14, built in 1966 and rebuilt in 1988, are used as reinforcements
at peak times and on the early morning staff train. They are reliable but expensive to maintain, and
spare parts for their traction motors now have to be made individually. Railcar 13 was out of
service for most of the year after a gearbox failure in February and returned only in November. The
Board has decided that railcars 11 to 14 will be withdrawn once their replacements arrive, as set
out in the section on plans below.

The historic fleet includes steam locomotive No. 3, built in 1921 for the construction of the line
and restored by volunteers between 1995 and 2002, and the two wooden carriages B 51 and B 52 from
1922. The historic train ran on 14 Sundays in 2023 and carried 4,870 passengers, most of them on the
Founders' Day excursion on 2 July. The Friends of the Rotkamm Railway, the association that looks
after the historic vehicles, donated 62,000 francs towards a boiler inspection and a new set of
driving wheels for No. 3.

The service fleet consists of the diesel-electric rack locomotive Hm 2/2 31, the battery locomotive
Ta 2/2 32 and the rotary snow plough Xrot 7. The most important event of the year for the service
fleet was the return of the Xrot 7 after a complete rebuild in the workshop at Kapellenboden. The
machine, built in 1961, had been withdrawn in 2020 when its diesel engine failed beyond repair.
Instead of buying a new plough for an estimated 3.5 million francs, the workshop team fitted a
battery-electric drive, rebuilt the rotor housing and renewed the cab, at a total cost of 1.12
million francs. At a small ceremony on 9 December 2023 the rebuilt plough was given the name "Vreni
Zgraggen" in honour of the line's first woman train driver, who qualified in 1971, drove the last
freight train in 1974 and kept the summit section open with the old plough throughout the avalanche
winter of 1999. Mrs Zgraggen, now 86 years old, cut the ribbon herself. The plough cleared its first
snow on the upper section five days later. With its return the cooperative once again has two
independent means of clearing the line above Kapellenboden, since the Hm 2/2 31 can also push a
small wedge plough.)DOC"
    R"DOC(

5. Operations and Ridership

Since the timetable change of 11 December 2022 trains have run every thirty minutes between 7:10 and
19:40, and every twenty minutes between 8:30 and 16:30 during the main winter and summer seasons. An
uphill journey takes 38 minutes and a downhill journey 41 minutes, because the speed limit on the
rack sections is lower when descending. Punctuality reached 97.1 percent of trains arriving within
three minutes of the timetable, compared with 95.8 percent in 2022. In total our trains ran 402,900
train kilometres.

Of the 612,480 passengers, 268,300 travelled in the winter season from December to April, 301,900 in
the summer season from June to September, and 42,280 in the quieter months of May, October and
November. The busiest single day was 30 December 2023, when 6,812 passengers used the railway and
the last train down left the summit eleven minutes late because of the queue at the ticket barrier.
The share of tickets sold online rose from 31 percent to 46 percent, helped by the new booking
website launched in June.

Residents of the valley continue to travel at a reduced rate. The cooperative sold 1,340 residents'
annual passes at 180 francs each, and 23 schoolchildren from Kapellenboden travel down to the school
in Aschental every day at no charge, their fares being paid by the municipality. The joint Rotkamm
Card with the regional post bus company, which combines a railway day ticket with bus travel in the
valley, sold 18,450 copies, twice as many as in its first year.

Customer feedback was largely positive. The customer service team answered 2,380 written enquiries
and complaints, most of them about crowding on the first trains of the morning in the winter
holidays and about the limited space for luggage. In a survey of 1,150 passengers in August, 88
percent rated their journey as good or very good, and the cleanliness of the trains received the
best score since the survey began in 2015. Passengers also asked for more frequent trains in the
early evening, which will be considered when the timetable for 2025 is prepared.

The four ski lifts carried 1.47 million rides in the 2022/23 winter season. The Kapellenboden area
opened on 10 December and closed on 10 April, giving 122 operating days; the upper chairlift was
closed on nine days because of wind. The summit restaurant served 148,000 meals and hosted 37
weddings and private events.)DOC"
    R"DOC(

6. Finances

Total operating revenue in 2023 was 21.36 million francs, an increase of 1.84 million over the
previous year. It consisted of fares of 14.71 million, ski lift tickets of 2.94 million, restaurant
revenue of 2.61 million, electricity sales of 0.29 million, compensation of 0.58 million from the
canton for local and school traffic, and other income of 0.23 million from rents, advertising and
events.

Operating expenses rose to 17.18 million francs. Personnel costs were the largest item at 10.42
million, followed by maintenance materials and outside services at 2.37 million, insurance and
administration at 1.64 million, energy at 1.08 million, goods for the restaurant at 0.96 million and
other operating costs at 0.71 million. The result before depreciation and interest was therefore
4.18 million francs. After depreciation of 3.41 million and net interest of 0.35 million, the year
closed with the surplus of 418,200 francs mentioned above.

Investments reached a record 11.46 million francs: 7.84 million for the Grauwand viaduct, 1.38
million for track renewal, 1.12 million for the rebuilt snow plough, 0.64 million for signalling and
0.48 million for smaller projects, including the new booking website. After subsidies, the
cooperative financed 5.96 million of this from its own funds and new borrowing.

At 31 December 2023 the balance sheet total was 86.4 million francs. Fixed assets amounted to 79.1
million and liquid funds to 5.2 million. On the other side, equity stood at 41.7 million, including
share capital of 4.37 million in 8,740 shares. Loans totalled 38.6 million, of which 21.9 million
were bank loans and 16.7 million interest-free loans from the canton and the federal government;
other liabilities accounted for the remaining 6.1 million. By its statutes the cooperative pays no
dividend. Instead, every member receives two free return tickets each year, and 4,108 of these
vouchers were redeemed in 2023.)DOC"
    R"DOC(

7. Staff and Members

At the end of the year the cooperative employed 143 people, corresponding to 118.6 full-time
positions. Train operations accounted for 41 employees, among them 29 drivers, infrastructure and
track for 24, the workshop for 17, the ski lifts for 19, the restaurant for 28 and administration
and sales for 14. In the winter season they were joined by 62 seasonal workers, mostly ski lift
attendants and restaurant staff. Women make up 31 percent of the workforce, and six of our drivers
are women. The average age is 43.7 years.

The wage agreement concluded with the staff association in January raised all salaries by 3.2
percent and introduced a fifth week of holiday for employees under fifty. The cooperative trained
seven apprentices: two polymechanics, two electricians, one track builder and two commercial
apprentices. All three apprentices who took their final examinations in the summer passed, and two
of them have stayed with the railway.

Several long-serving colleagues retired. Ernst Ammann, foreman of the workshop, left after 44 years;
his successor is Petra Inäbnit, who joined the railway as an apprentice electrician in 2002. On 1
September Lukas Gehrig took over as Director of Operations from Theres Marbach, who retired after
fifteen years in the post. Recruiting drivers remains difficult: we needed eleven months to fill two
vacancies, and the Board has approved a new training programme in which career changers are paid
during their eighteen months of training.

The number of members rose from 2,793 to 2,916. The cooperative welcomed 184 new members, while 61
memberships ended through death or resignation. The General Assembly of 29 April 2023 in the
Aschental sports hall was attended by 684 members, the highest attendance since the vote on the
merger with the ski lift company in 2004.)DOC"
    R"DOC(

8. Safety, Incidents and Weather

No passenger or employee was seriously injured in 2023. Seven incidents were reported to the federal
transport office, compared with nine in 2022:

On 8 January a skier slipped between the platform and a train at Kapellenboden and suffered a minor
wrist injury; the platform edge marking has since been improved. On 23 February the line above
Kesselhütte was closed for six hours as a precaution during avalanche blasting. On 11 March the
pantograph of railcar 22 was damaged by ice on the overhead line near Brunnegg, interrupting service
for two hours. On 17 August a debris flow after a thunderstorm covered the track at Kapellenboden
with gravel and mud; the line was interrupted for nineteen hours, and 340 passengers were taken down
to the valley by minibuses on the forestry road. On 3 October a train made an emergency stop for a
cow on the track near Brunnegg, and two passengers suffered bruises. On 29 October a power surge
disabled the axle counters at the Kesseltunnel, and trains ran on written orders for half a day. On
21 December a work wagon derailed at walking pace in the depot, without injuries.

Five workplace accidents led to absence from work, with a total of 61 days lost, the lowest figure
in ten years. Snowfall at Kapellenboden in the 2022/23 winter totalled 4.62 metres, about 15 percent
below the long-term average, while the first half of the 2023/24 winter brought more snow in
December than in any December since 2012.)DOC"
    R"DOC(

9. Environment and Community

The railway runs entirely on electricity from our own plant, and in June we installed solar panels
with a capacity of 480 kilowatts on the roof of the Kapellenboden depot; by the end of the year they
had produced 312 megawatt hours. The cooperative's remaining direct emissions of 214 tonnes of
carbon dioxide come mainly from the diesel locomotive, the heating of the summit restaurant and the
staff vehicles. Our goal is to eliminate them by 2030.

Together with the Aschental Nature Society we mow the embankments later in the year to protect wild
flowers, and volunteers counted 212 flowering lady's slipper orchids along the line in June. On 2
July the small railway museum in the former goods shed at Aschental station opened its doors; it
received 3,400 visitors by the end of October. For the Unterschwend cheese market on 7 October the
railway once again carried visitors free of charge between Aschental and Kapellenboden.)DOC"
    R"DOC(

10. Outlook and Plans for 2024 to 2028

In November 2023 the Board ordered four new articulated railcars, numbered 41 to 44, from Thalwerk
at a total price of 28.6 million francs. They will replace the railcars 11 to 14 and are to be
delivered in 2026 and 2027. The canton has promised to contribute 40 percent of the cost; the rest
will come from the rolling stock reserve and from new bank loans.

The next major infrastructure project is the renewal of the upper section between Kapellenboden and
the summit, including repairs to the lining of the Kesseltunnel and new rack on 2.1 kilometres of
track. The work is estimated at 14.2 million francs and will require a full closure of the upper
section for ten weeks in the autumn of 2025. A new accessible platform and lift at the summit
station, costing 3.9 million francs, are to follow by 2027. The extension of the passing loop at
Brunnegg, estimated at 1.6 million francs, will allow trains every twenty minutes throughout the
summer day from 2025.

Fares were raised by an average of 4.5 percent at the timetable change of 10 December 2023; the
price of the residents' annual pass remains unchanged. For 2024 the Board expects revenue of about
21.9 million francs and a surplus between 0.2 and 0.3 million francs. The main risks are rising
energy and construction prices, the difficulty of recruiting drivers and mechanics, and the effects
of a changing climate, which brings less reliable snow below 1,500 metres and more frequent debris
flows in summer.

The Board asks the General Assembly to approve the annual accounts, to allocate the surplus to the
rolling stock reserve, and to elect Annelies Ruppen as the new Chair of the Board.

On behalf of the Board of Directors
Aschental, 14 March 2024)DOC";

const char kQuestion[] =
    "\n\nQuestion: After whom was the rebuilt rotary snow plough Xrot 7 named?\n"
    "Answer in one sentence.";

}  // namespace

std::string demo_prompt() {
  std::string prompt = kDocument;
  prompt += kQuestion;
  return prompt;
}

}  // namespace kascade::cli
